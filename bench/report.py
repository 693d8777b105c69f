"""Writes a benchmark run: latest.json (everything), latest.md (the goals table and the numbers
behind it) and PNG plots (latency distributions, throughput over time), all from one results
document, so the plots can be redrawn from the JSON alone."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.goals import Metric, evaluate
from bench.phases import PHASES

SCHEMA_VERSION = 1
JSON_NAME = "latest.json"
MARKDOWN_NAME = "latest.md"

#: (file name, title, [(part, key, label)]) of each latency plot.
LATENCY_PLOTS: tuple[tuple[str, str, tuple[tuple[str, str, str], ...]], ...] = (
    (
        "latency-decision.png",
        "Decision overhead (one call at a time)",
        (
            ("decision", "execute_read", "Execute(Read 1 KB), decision reused"),
            ("decision", "execute_read_fresh", "Execute(Read 1 KB), OPA asked"),
            ("decision", "health", "grpc health Check"),
            ("decision", "opa", "OPA decision query"),
        ),
    ),
    (
        "latency-readonly.png",
        "Read-only mix under concurrent clients",
        (
            ("readonly.by_kind", "Read", "Read"),
            ("readonly.by_kind", "Glob", "Glob"),
            ("readonly.by_kind", "Grep", "Grep"),
            ("readonly", "latency", "all"),
        ),
    ),
    (
        "latency-sandbox.png",
        "Bash `echo hi`",
        (
            ("sandbox", "warm", "warm pool"),
            ("sandbox", "docker_run", "docker run --rm"),
            ("sandbox", "docker_exec", "docker exec"),
            ("sandbox", "llm_sandbox", "llm-sandbox"),
            ("sandbox", "health_spaced", "health Check, started as the warm calls are"),
            ("sandbox", "opa_bash_spaced", "OPA asked their decision, started so too"),
            ("cold", "cold", "cold (pool size 0)"),
            ("churn", "latency", "churn (back to back)"),
        ),
    ),
    (
        "latency-batch.png",
        "10 Grep over the generated tree",
        (
            ("batch", "sequential", "10 sequential Execute"),
            ("batch", "batch", "one ExecuteBatch"),
        ),
    ),
)
THROUGHPUT_PLOT = "throughput.png"


def build_results(parts: Mapping[str, Any], meta: Mapping[str, Any]) -> dict[str, Any]:
    """The results document: run metadata, every part's numbers and the judged metrics."""
    metrics = evaluate(parts)
    return {
        "schema": SCHEMA_VERSION,
        **meta,
        "metrics": [m.as_dict() for m in metrics],
        "parts": dict(parts),
    }


def _value(metric: Mapping[str, Any]) -> str:
    value = metric["value"]
    if value is None:
        return "not measured"
    if isinstance(value, float) and not value.is_integer():
        shown = f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    else:
        shown = f"{int(value):,}"
    return f"{shown} {metric['unit']}"


def _met(flag: bool | None, has_goal: bool) -> str:
    if not has_goal:
        return "-"
    return {True: "met", False: "**not met**", None: "not measured"}[flag]


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def metrics_table(results: Mapping[str, Any]) -> list[str]:
    """Every metric row with its goal and whether it holds, as markdown table lines."""
    lines = ["| metric | value | goal | met | details |", "|---|---|---|---|---|"]
    for metric in results.get("metrics", []):
        has_goal = metric["goal"] != "-"
        lines.append(
            "| "
            + " | ".join(
                _cell(x)
                for x in (
                    metric["metric"],
                    _value(metric),
                    metric["goal"],
                    _met(metric["met"], has_goal),
                    metric["detail"],
                )
            )
            + " |"
        )
    return lines


def render_markdown(results: Mapping[str, Any]) -> str:
    """The goals table, then what ran where, for people reading the repository."""
    machine = results.get("machine", {})
    lines = [
        f"# tooljail benchmark ({results.get('mode', '?')} run)",
        "",
        f"{results.get('started', '?')}, {machine.get('cpus', '?')} CPUs, "
        f"commit {machine.get('git_revision', '?')}, Python {machine.get('python', '?')}, "
        f"Docker {machine.get('docker', '?')}, OPA {machine.get('opa', '?')}; "
        f"{results.get('duration_s', 0):.0f} s in all. Ratios are the headline: absolute times on "
        "a shared 2-core machine drift.",
        "",
        *metrics_table(results),
    ]
    failures = results.get("failures", [])
    if failures:
        lines += ["", "## Parts that did not complete", ""]
        lines += [f"- {_cell(f['part'])}: {_cell(f['error'])}" for f in failures]
    lines += [
        "",
        "## Latencies (ms)",
        "",
        "| part | n | p50 | p95 | p99 | max |",
        "|---|---|---|---|---|---|",
    ]
    for _, _, series in LATENCY_PLOTS:
        for part, key, label in series:
            summary = _summary(results, part, key)
            if summary and summary.get("n"):
                lines.append(
                    f"| {part.split('.')[0]}: {label} | {summary['n']} | "
                    + " | ".join(
                        f"{summary[k]:.2f}" for k in ("p50_ms", "p95_ms", "p99_ms", "max_ms")
                    )
                    + " |"
                )
    lines += _phase_lines(results)
    loads = [
        (name, part["machine_load"])
        for name, part in results.get("parts", {}).items()
        if isinstance(part, Mapping) and isinstance(part.get("machine_load"), Mapping)
    ]
    if loads:
        lines += [
            "",
            "## Machine load during each part",
            "",
            "All CPUs busy (any process, the benchmark's own included) and the 1-minute load "
            "average at the start and end of the part.",
            "",
            "| part | CPUs busy | load average |",
            "|---|---|---|",
        ]
        lines += [
            f"| {name} | {load['cpu_busy']:.0%} | {load['loadavg_1m_start']:.1f} -> "
            f"{load['loadavg_1m_end']:.1f} |"
            for name, load in loads
        ]
    notes = results.get("notes", [])
    if notes:
        lines += ["", "## How it was measured", ""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def _phase_lines(results: Mapping[str, Any]) -> list[str]:
    """The breakdown of one warm sandboxed call (bench.phases), when it was measured."""
    found = _summary(results, "sandbox", "phases")
    if not found or not found.get("phases_ms"):
        return []
    lines = [
        "",
        "## Where a warm sandboxed call's time goes",
        "",
        "Bash `echo hi` on a warm container: the mean of each phase over the part's calls, from "
        "the daemon's phase metrics (`tooljail_call_phase_seconds`); outside the daemon is what "
        "the client waited beyond them (gRPC, protobuf, the socket, both processes' scheduling).",
        "",
        "| phase | mean ms | what |",
        "|---|---|---|",
    ]
    described = dict(PHASES)
    for phase, ms in found["phases_ms"].items():
        lines.append(f"| {phase} | {ms:.2f} | {_cell(described.get(phase, ''))} |")
    lines.append(f"| inside the daemon | {found['daemon_ms']:.2f} | the phases above |")
    if found.get("outside_daemon_ms") is not None:
        lines.append(
            f"| outside the daemon | {found['outside_daemon_ms']:.2f} | client mean "
            f"{found['client_mean_ms']:.2f} ms minus the phases |"
        )
    if found.get("outside_floor_ms") is not None:
        lines.append(
            f"| its floor: a health Check | {found['outside_floor_ms']:.2f} | the whole round "
            "trip of a health Check started as the calls are (pool full, same pause): gRPC and "
            "both processes waking up, no tooljail work |"
        )
    return lines


def _summary(results: Mapping[str, Any], part: str, key: str) -> Mapping[str, Any] | None:
    node: Any = results.get("parts", {})
    for name in (*part.split("."), key):
        node = node.get(name) if isinstance(node, Mapping) else None
    return node if isinstance(node, Mapping) else None


def plot_all(results: Mapping[str, Any], out_dir: Path) -> list[Path]:
    """Latency CDFs and throughput over time as PNGs; returns the files written."""
    import matplotlib

    matplotlib.use("Agg")  # no display: files only
    import matplotlib.pyplot as plt

    written = []
    for name, title, series in LATENCY_PLOTS:
        curves = []
        for part, key, label in series:
            summary = _summary(results, part, key)
            if summary and summary.get("cdf_ms"):
                curves.append((label, summary["cdf_ms"], summary["n"]))
        if not curves:
            continue
        fig, ax = plt.subplots(figsize=(7, 4))
        for label, cdf, n in curves:
            fractions = [i / (len(cdf) - 1) for i in range(len(cdf))]
            ax.step(cdf, fractions, where="post", label=f"{label} (n={n})")
        ax.set_xscale("log")
        ax.set_xlabel("latency (ms, log scale)")
        ax.set_ylabel("fraction of calls at or below")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small")
        written.append(_save(fig, out_dir / name))
    throughput = _throughput_series(results)
    if throughput:
        fig, axes = plt.subplots(len(throughput), 1, figsize=(7, 2.6 * len(throughput)))
        for ax, (label, counts) in zip(_as_list(axes), throughput, strict=True):
            ax.plot(range(1, len(counts) + 1), counts, marker=".", drawstyle="steps-mid")
            ax.set_title(label)
            ax.set_xlabel("second of the run")
            ax.set_ylabel("calls completed")
            ax.set_ylim(bottom=0)
            ax.grid(True, alpha=0.3)
        written.append(_save(fig, out_dir / THROUGHPUT_PLOT))
    plt.close("all")
    return written


def _as_list(axes: Any) -> Sequence[Any]:
    return list(axes) if hasattr(axes, "__len__") else [axes]


def _throughput_series(results: Mapping[str, Any]) -> list[tuple[str, list[int]]]:
    found = []
    for part, label in (("readonly", "read-only mix"), ("churn", "sandbox churn (Bash)")):
        node = results.get("parts", {}).get(part)
        if isinstance(node, Mapping) and node.get("series"):
            found.append((f"{label}: {node.get('clients')} clients, 1 s buckets", node["series"]))
    return found


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path


def write_all(results: Mapping[str, Any], out_dir: Path) -> list[Path]:
    """latest.json, latest.md and the plots in `out_dir`; returns the files written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / JSON_NAME
    json_path.write_text(json.dumps(results, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    md_path = out_dir / MARKDOWN_NAME
    md_path.write_text(render_markdown(results), encoding="utf-8")
    return [json_path, md_path, *plot_all(results, out_dir)]


def unmet(results: Mapping[str, Any]) -> list[Metric]:
    """Metrics whose goal does not hold (for the console summary)."""
    return [Metric(**m) for m in results.get("metrics", []) if m["met"] is False]
