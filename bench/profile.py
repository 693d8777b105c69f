"""Sampling the daemon with py-spy while it is under load, and what dominates the samples."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

PY_SPY = Path(sys.executable).parent / "py-spy"
_LINE_NUMBER = re.compile(r":\d+\)$")


def start_recording(
    pid: int, seconds: float, output: Path, rate_hz: int = 100, native: bool = True
) -> subprocess.Popen[bytes]:
    """py-spy record of `pid` for `seconds` into `output`, as collapsed stacks.

    Only samples of the thread holding the GIL are kept (`--gil`): the daemon's Python code runs
    one thread at a time, so these are what its throughput is made of; threads waiting for work
    or for a child process would otherwise fill the profile. `--native` resolves the time spent
    in C and Cython (grpc's event handling) instead of showing it as the Python caller's own.
    """
    if not PY_SPY.exists():
        raise RuntimeError(f"{PY_SPY} is missing: pip install py-spy into the virtualenv")
    return subprocess.Popen(
        [
            str(PY_SPY),
            "record",
            "--gil",
            *(["--native"] if native else []),
            "--pid",
            str(pid),
            "--duration",
            str(max(1, round(seconds))),
            "--rate",
            str(rate_hz),
            "--format",
            "raw",
            "--output",
            str(output),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


@dataclass(frozen=True)
class ProfileSummary:
    """Where the samples fell."""

    samples: int
    self_top: list[tuple[str, int]]
    """Functions by samples spent in the function itself."""
    inclusive_top: list[tuple[str, int]]
    """Functions by samples spent in them or below them."""


def _frame(raw: str) -> str:
    return _LINE_NUMBER.sub(")", raw.strip())


def stack_frames(stack: str) -> list[str]:
    """The frames of one collapsed stack, outermost first, without line numbers and without the
    thread's own frame (`process 123:"python"` or a thread name) when there are real ones."""
    frames = [_frame(f) for f in stack.split(";")]
    return [f for f in frames if " (" in f] or frames


def summarize_collapsed(text: str, top: int = 25) -> ProfileSummary:
    """Self and inclusive sample counts per function from py-spy's collapsed ("raw") output:
    one line per distinct stack, frames joined by ';', then the sample count."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack_frames(stack)
        n = int(count)
        total += n
        own[frames[-1]] += n
        for frame in set(frames):
            inclusive[frame] += n
    return ProfileSummary(total, own.most_common(top), inclusive.most_common(top))


def render(summary: ProfileSummary, title: str) -> str:
    """The summary as markdown tables."""
    lines = [
        f"# {title}",
        "",
        f"{summary.samples} samples, each of the thread holding the GIL (py-spy --gil).",
        "",
    ]
    for heading, rows in (("self", summary.self_top), ("inclusive", summary.inclusive_top)):
        lines += [
            f"## Top functions ({heading})",
            "",
            "| share | samples | function |",
            "|---|---|---|",
        ]
        for frame, n in rows:
            share = n / summary.samples if summary.samples else 0
            lines.append(f"| {share:.1%} | {n} | `{frame.replace('|', '/')}` |")
        lines.append("")
    return "\n".join(lines)
