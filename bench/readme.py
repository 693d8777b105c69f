"""The README's performance table, written from a benchmark's results: every goal row with what
was measured and whether it holds, between two marker lines that nothing else touches.

    .venv/bin/python -m bench.readme     # from bench/results/latest.json (make bench runs it)
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench import processes
from bench.report import JSON_NAME, metrics_table

README = processes.ROOT / "README.md"
RESULTS = processes.ROOT / "bench" / "results" / JSON_NAME
BEGIN = "<!-- bench-table: written by make bench from bench/results/latest.json -->"
END = "<!-- bench-table end -->"


def table(results: Mapping[str, Any]) -> str:
    """The markdown table (with the run it came from) that goes between the markers."""
    machine = results.get("machine", {})
    lines = [
        f"From the {results.get('mode', '?')} run of {results.get('started', '?')} (commit "
        f"{machine.get('git_revision', '?')}, {machine.get('cpus', '?')} CPUs, Docker "
        f"{machine.get('docker', '?')}, OPA {machine.get('opa', '?')}):",
        "",
        *metrics_table(results),
    ]
    return "\n".join(lines)


def rewrite(text: str, results: Mapping[str, Any]) -> str:
    """`text` with what lies between the markers replaced by the table.

    Raises:
        ValueError: The markers are missing, repeated or out of order.
    """
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise ValueError(f"the README needs exactly one {BEGIN!r} line before one {END!r} line")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{table(results)}\n{END}{tail}"


def update(readme: Path = README, results_path: Path = RESULTS) -> None:
    """Rewrite the README's table from a results file."""
    results = json.loads(results_path.read_text(encoding="utf-8"))
    readme.write_text(rewrite(readme.read_text(encoding="utf-8"), results), encoding="utf-8")


def main() -> int:
    """Rewrite README.md's table from bench/results/latest.json."""
    try:
        update()
    except (OSError, ValueError) as exc:
        print(f"cannot update the README's table: {exc}", file=sys.stderr)
        return 1
    print(f"{README.name}: performance table rewritten from {RESULTS.relative_to(processes.ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
