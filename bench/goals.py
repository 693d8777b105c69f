"""The issue's goals, judged against measured parts: one metric row per goal, met or not.

A goal is met only when its value was measured: a part that was skipped or crashed gives a row
with no value and `met` None ("not measured"), never a silent pass. Rows without a goal in the
issue (CPU per call, flood time against `docker run`) are reported with `met` None too.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from bench.phases import warm_floor_ms
from bench.stats import ratio

Parts = Mapping[str, Any]

_COMPARE: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    "<": operator.lt,
    ">=": operator.ge,
    "==": operator.eq,
}

#: A flood result is "at budget" when it is within this many characters below it: the head and
#: tail are cut on line boundaries, so the last partial line may be dropped.
AT_BUDGET_SLACK_CHARS = 100


@dataclass(frozen=True)
class Metric:
    """One row of the results table."""

    id: str
    """Stable key (e.g. `readonly.calls_per_s`)."""
    metric: str
    """What was measured, for people."""
    value: float | None
    """The measured value (None: not measured)."""
    unit: str
    goal: str
    """The issue's goal as text, or "-" when the issue sets none."""
    met: bool | None
    """Whether the goal holds; None when not measured or when there is no goal."""
    detail: str = ""
    """The numbers behind the value (baselines, percentiles)."""

    def as_dict(self) -> dict[str, Any]:
        """The row as JSON-ready data."""
        return asdict(self)


def _get(parts: Parts, *path: str) -> Any:
    node: Any = parts
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return node


def _judge(value: float | None, comparator: str, target: float) -> bool | None:
    return None if value is None else _COMPARE[comparator](value, target)


def _row(
    id_: str, metric: str, value: float | None, unit: str, comparator: str, target: float, **kw: str
) -> Metric:
    shown = f"{target:g}" if unit != "×" else f"{target:g} ×"
    goal = {"<=": "at most", "<": "under", ">=": "at least", "==": "exactly"}[comparator]
    return Metric(
        id_, metric, value, unit, f"{goal} {shown}", _judge(value, comparator, target), **kw
    )


def _info(id_: str, metric: str, value: float | None, unit: str, detail: str = "") -> Metric:
    return Metric(id_, metric, value, unit, "-", None, detail)


def _ms(summary: Any, key: str = "p50_ms") -> float | None:
    return summary.get(key) if isinstance(summary, Mapping) else None


def _fmt(value: float | None, unit: str = "ms") -> str:
    if value is None:
        return "n/a"
    return f"{value:,.0f} {unit}" if abs(value) >= 100 else f"{value:.3g} {unit}"


def decision_metrics(parts: Parts) -> list[Metric]:
    """Execute(Read 1 KB) p50 against health Check p50 + OPA decision p50: the same Read every
    time (its decision reused, as the shipped policy allows for read-only calls), and a Read
    whose input changes every time (every decision asked of OPA)."""
    health, opa = _get(parts, "decision", "health"), _get(parts, "decision", "opa")
    base = None
    if _ms(health) is not None and _ms(opa) is not None:
        base = _ms(health) + _ms(opa)  # type: ignore[operator]
    baseline = f"health Check p50 {_fmt(_ms(health))} + OPA decision p50 {_fmt(_ms(opa))}"
    rows = []
    for id_, key, label, target in (
        ("decision.p50_ratio", "execute_read", "the same Read again (decision reused)", 1.5),
        ("decision.fresh_p50_ratio", "execute_read_fresh", "a new Read input (OPA asked)", 1.2),
    ):
        execute = _get(parts, "decision", key)
        rows.append(
            _row(
                id_,
                f"decision overhead, {label}: Execute(Read 1 KB) p50 / (health p50 + OPA p50)",
                ratio(_ms(execute), base),
                "×",
                "<=",
                target,
                detail=f"Execute p50 {_fmt(_ms(execute))}, p99 {_fmt(_ms(execute, 'p99_ms'))}; "
                f"{baseline} = {_fmt(base)}",
            )
        )
    rows.append(_query_metric(parts))
    return rows


def _query_metric(parts: Parts) -> Metric:
    """What asking OPA adds to a Read (a new input's p50 minus the same Read's, whose decision is
    reused) against OPA's own p50 for the query: about 1 means the daemon adds nothing to the
    query itself, and the rest of the OPA-asked ratio is the Read's own work."""
    reused = _ms(_get(parts, "decision", "execute_read"))
    fresh = _ms(_get(parts, "decision", "execute_read_fresh"))
    health, opa = _ms(_get(parts, "decision", "health")), _ms(_get(parts, "decision", "opa"))
    metric = "decision overhead, OPA asked: (new Read p50 - reused Read p50) / OPA p50"
    if reused is None or fresh is None or health is None or opa is None:
        return _info("decision.query_ratio", metric, None, "×")
    return _info(
        "decision.query_ratio",
        metric,
        ratio(fresh - reused, opa),
        "×",
        f"asking OPA adds {_fmt(fresh - reused)} against its own {_fmt(opa)}; the same Read's "
        f"own work beyond a health Check is {_fmt(reused - health)}, which the 1.2 x goal "
        f"leaves {_fmt(0.2 * (health + opa))}",
    )


def floor_metrics(parts: Parts) -> list[Metric]:
    """What the gRPC server alone allows on this machine: health Checks under the same clients."""
    part = _get(parts, "floor")
    if not isinstance(part, Mapping) or not part.get("calls"):
        return [_info("floor.calls_per_s", "gRPC floor: health Check throughput", None, "calls/s")]
    cpu_ms = part["daemon_cpu_s"] * 1000 / part["calls"]
    return [
        _info(
            "floor.calls_per_s",
            "gRPC floor: health Check throughput (no tooljail work at all)",
            part.get("calls_per_s"),
            "calls/s",
            f"{part['clients']} clients, {_fmt(part['duration_s'], 's')}, p99 "
            f"{_fmt(_ms(part.get('latency'), 'p99_ms'))}; daemon CPU {cpu_ms:.2f} ms per Check",
        )
    ]


def readonly_metrics(parts: Parts) -> list[Metric]:
    """Calls/s, p99 and errors of the read-only mix under concurrent clients."""
    part = _get(parts, "readonly")
    if not isinstance(part, Mapping):
        part = {}
    clients, seconds = part.get("clients"), part.get("duration_s")
    load = f"{clients} clients, {_fmt(seconds, 's')}" if clients else "not measured"
    latency = part.get("latency")
    return [
        _row(
            "readonly.calls_per_s",
            "read-only throughput",
            part.get("calls_per_s"),
            "calls/s",
            ">=",
            1500,
            detail=f"{load}, {part.get('calls', 0)} calls, mix {part.get('mix', {})}",
        ),
        _row(
            "readonly.p99_ms",
            "read-only latency p99",
            _ms(latency, "p99_ms"),
            "ms",
            "<",
            20,
            detail=f"p50 {_fmt(_ms(latency))}, p95 {_fmt(_ms(latency, 'p95_ms'))}",
        ),
        _row(
            "readonly.floor_ratio",
            "read-only throughput / the gRPC floor (health Checks, same clients)",
            ratio(part.get("calls_per_s"), _get(parts, "floor", "calls_per_s")),
            "×",
            ">=",
            0.5,
            detail=f"read-only {_fmt(part.get('calls_per_s'), 'calls/s')}, floor "
            f"{_fmt(_get(parts, 'floor', 'calls_per_s'), 'calls/s')}",
        ),
        _readonly_ceiling(parts),
        _row("readonly.errors", "read-only errors", part.get("errors"), "calls", "==", 0),
    ]


def _readonly_ceiling(parts: Parts) -> Metric:
    """What the read-only mix could reach on this machine if the daemon's own work per call cost
    no more than a health Check's: the cores spent on everything else a call needs (ripgrep's
    processes, the client, OPA) and on that Check, against the gRPC floor of the same run."""
    label = "read-only throughput: its ceiling / the gRPC floor (same run)"
    part, floor = _get(parts, "readonly"), _get(parts, "floor")
    if not (
        isinstance(part, Mapping)
        and isinstance(floor, Mapping)
        and part.get("calls")
        and part.get("cpus")
        and floor.get("calls")
        and floor.get("daemon_cpu_s") is not None
    ):
        return _info("readonly.ceiling_ratio", label, None, "×", "not measured")
    calls = part["calls"]
    others_ms = {
        "ripgrep": (part.get("daemon_children_cpu_s") or 0.0) * 1000 / calls,
        "the client": (part.get("client_cpu_s") or 0.0) * 1000 / calls,
        "OPA": (part.get("opa_cpu_s") or 0.0) * 1000 / calls,
        "a health Check in the daemon": floor["daemon_cpu_s"] * 1000 / floor["calls"],
    }
    ceiling = part["cpus"] * 1000 / sum(others_ms.values())
    return _info(
        "readonly.ceiling_ratio",
        label,
        ratio(ceiling, floor.get("calls_per_s")),
        "×",
        f"ceiling {_fmt(ceiling, 'calls/s')}: {part['cpus']} CPUs over "
        + " + ".join(f"{name} {ms:.2f} ms" for name, ms in others_ms.items())
        + " per call; a throughput goal over this ratio is past what the machine allows with "
        "ripgrep a process per Grep",
    )


#: Warm Bash p50 against `docker run` p50 (issue 23's goal 2).
WARM_GOAL = 0.03


def sandbox_metrics(parts: Parts) -> list[Metric]:
    """Warm Bash `echo hi` against its peers in the same loop (`docker run`, `docker exec`,
    llm-sandbox), and cold against `docker run` of the same image and command."""
    warm = _get(parts, "sandbox", "warm")
    docker_run = _get(parts, "sandbox", "docker_run")
    cold, cold_run = _get(parts, "cold", "cold"), _get(parts, "cold", "docker_run")
    warm_text = f"warm p50 {_fmt(_ms(warm))}, p95 {_fmt(_ms(warm, 'p95_ms'))}"
    # The warm calls' own decision, asked of OPA as they are started (older runs: a Read's).
    own_decision = _ms(_get(parts, "sandbox", "opa_bash_spaced"))
    decision = own_decision if own_decision is not None else _ms(_get(parts, "decision", "opa"))
    asked = (
        "the same Bash decision asked of OPA directly, started as the calls are"
        if own_decision is not None
        else "a Read's; a Bash command's takes longer"
    )
    floor = warm_floor_ms(_get(parts, "sandbox", "phases"), decision)
    floor_ratio = None if floor is None else ratio(sum(floor), _ms(docker_run))
    rows = [
        _row(
            "sandbox.warm_ratio",
            "sandboxed latency, warm pool: p50 / docker run p50 (same loop)",
            ratio(_ms(warm), _ms(docker_run)),
            "×",
            "<=",
            WARM_GOAL,
            detail=f"{warm_text}; docker run p50 {_fmt(_ms(docker_run))}"
            + (
                f"; past this run's floor ({floor_ratio:.3g} ×, the next row)"
                if floor_ratio is not None and floor_ratio > WARM_GOAL
                else ""
            ),
        ),
        _info(
            "sandbox.warm_floor_ratio",
            "sandboxed latency, warm pool: its floor / docker run p50 (same run)",
            floor_ratio,
            "×",
            "not measured (needs the decision and sandbox parts)"
            if floor is None
            else f"floor {_fmt(sum(floor))}: a health Check's round trip started as the calls "
            f"are {_fmt(floor[0])} + an OPA decision p50 {_fmt(floor[1])} ({asked}) + the "
            f"container's own phases {_fmt(floor[2])} (request in, "
            "bash spawned, run and ended, result out; means); a goal under this ratio is past "
            "the floor of a fresh container per call decided by OPA",
        ),
    ]
    for key, label, why in (
        ("docker_exec", "`docker exec` into a running container", "one container for every call"),
        (
            "llm_sandbox",
            "llm-sandbox `execute_command`, one open session",
            _get(parts, "sandbox", "llm_sandbox_missing") or "one container for every call",
        ),
    ):
        peer = _get(parts, "sandbox", key)
        rows.append(
            _info(
                f"sandbox.{key}_ratio",
                f"sandboxed latency, warm pool: p50 / {label} p50 (same loop)",
                ratio(_ms(warm), _ms(peer)),
                "×",
                f"{warm_text}; peer p50 {_fmt(_ms(peer))}, p95 {_fmt(_ms(peer, 'p95_ms'))} "
                f"({why}; tooljail starts every call in a fresh container)",
            )
        )
    rows.append(
        _row(
            "sandbox.cold_ratio",
            "sandboxed latency, cold (pool size 0): p50 / docker run p50",
            ratio(_ms(cold), _ms(cold_run)),
            "×",
            "<=",
            1.1,
            detail=f"cold p50 {_fmt(_ms(cold))}, p95 {_fmt(_ms(cold, 'p95_ms'))}; "
            f"docker run p50 {_fmt(_ms(cold_run))}",
        )
    )
    return rows


def _per(seconds: float | None, count: object) -> float | None:
    """Milliseconds of `seconds` per one of `count`."""
    if seconds is None or not isinstance(count, int | float) or count <= 0:
        return None
    return seconds * 1000 / count


def _churn_cpu_row(part: Mapping[str, Any], engine: Mapping[str, Any]) -> Metric:
    """Where the churn ratio comes from: with every CPU busy in both, calls/s follow the CPU the
    whole machine spends per call (the engine, the container and its runner, the daemon, OPA,
    the client) against what it spends per bare container."""
    calls = part.get("calls")
    per_call = _per(part.get("machine_cpu_s"), calls)
    per_container = _per(engine.get("machine_cpu_s"), engine.get("containers"))
    named = {
        "the daemon": _per(part.get("daemon_cpu_s"), calls),
        "OPA": _per(part.get("opa_cpu_s"), calls),
        "the client": _per(part.get("client_cpu_s"), calls),
    }
    rest = None
    if per_call is not None and None not in named.values():
        rest = per_call - sum(v for v in named.values() if v is not None)
    busy = {
        "tooljail": ratio(part.get("machine_cpu_s"), part.get("duration_s")),
        "the engine": ratio(engine.get("machine_cpu_s"), engine.get("duration_s")),
    }
    shown_busy = ", ".join(f"{who} {_fmt(value, 'CPUs')}" for who, value in busy.items())
    return _info(
        "churn.machine_cpu_ratio",
        "sandbox churn: the machine's CPU per call / per bare-engine container (same run)",
        ratio(per_call, per_container),
        "×",
        detail=f"tooljail {_fmt(per_call)} a call: "
        + ", ".join(f"{who} {_fmt(value)}" for who, value in named.items())
        + f", the rest {_fmt(rest)} (the engine, the container and its runner); the bare engine "
        f"{_fmt(per_container)} a container; busy on average: {shown_busy}. When both keep "
        "the CPUs busy, the calls/s ratio above is about the inverse of this one",
    )


def churn_metrics(parts: Parts) -> list[Metric]:
    """Back-to-back sandboxed calls against the bare engine churning containers with the same
    hardening: rate, errors, containers left behind."""
    part = _get(parts, "churn")
    if not isinstance(part, Mapping):
        part = {}
    engine = _get(parts, "engine_churn")
    if not isinstance(engine, Mapping):
        engine = {}
    leaked = None
    if part.get("leaked_running") is not None and part.get("leaked_after_stop") is not None:
        leaked = part["leaked_running"] + part["leaked_after_stop"]
    clients, seconds = part.get("clients"), part.get("duration_s")
    load = f"{clients} clients, {_fmt(seconds, 's')}" if clients else "not measured"
    engine_rate = engine.get("containers_per_s")
    return [
        _row(
            "churn.engine_ratio",
            "sandbox churn: calls/s / the bare engine's containers/s (same hardening)",
            ratio(part.get("calls_per_s"), engine_rate),
            "×",
            ">=",
            0.9,
            detail=f"tooljail {_fmt(part.get('calls_per_s'), 'calls/s')} ({load}, "
            f"{part.get('calls', 0)} calls, a fresh container each); engine "
            f"{_fmt(engine_rate, 'containers/s')} ({engine.get('workers')} workers doing create, "
            f"start, wait, remove; {engine.get('containers', 0)} containers, "
            f"{engine.get('errors', 'n/a')} errors)",
        ),
        _row(
            "churn.calls_per_s",
            "sandbox churn throughput",
            part.get("calls_per_s"),
            "calls/s",
            ">=",
            10,
            detail=f"past the engine's floor here when the ratio above is under 1: the bare "
            f"engine managed {_fmt(engine_rate, 'containers/s')}",
        ),
        _churn_cpu_row(part, engine),
        _row("churn.errors", "sandbox churn errors", part.get("errors"), "calls", "==", 0),
        _row(
            "churn.leaked",
            "sandbox churn leaked containers",
            leaked,
            "containers",
            "==",
            0,
            detail=f"beyond the warm pool after the load: {part.get('leaked_running')}; "
            f"after the daemon stopped: {part.get('leaked_after_stop')}",
        ),
    ]


def batch_metrics(parts: Parts) -> list[Metric]:
    """ExecuteBatch of 10 Grep against the same 10 as sequential Execute calls."""
    sequential, batch = _get(parts, "batch", "sequential"), _get(parts, "batch", "batch")
    files = _get(parts, "batch", "files")
    return [
        _row(
            "batch.speedup",
            "batch speed-up: sequential p50 / ExecuteBatch p50 (10 Grep)",
            ratio(_ms(sequential), _ms(batch)),
            "×",
            ">=",
            1.8,
            detail=f"{files} files; sequential p50 {_fmt(_ms(sequential))}, "
            f"batch p50 {_fmt(_ms(batch))}; in every batch at least "
            f"{_get(parts, 'batch', 'shared_calls')} of the 10 calls shared one ripgrep walk",
        ),
        _info(
            "batch.rg_thread_speedup",
            "ripgrep alone: the 10 searches with one thread each / with its default threads",
            ratio(
                _get(parts, "batch", "rg_one_thread_s"),
                _get(parts, "batch", "rg_default_threads_s"),
            ),
            "×",
            "one search already spreads over the cores, so 10 run side by side could gain at "
            "most (cores / this); the batch gains more by sharing one walk of the tree",
        ),
    ]


def flood_metrics(parts: Parts) -> list[Metric]:
    """1 GiB of Bash output: the result stays within its budget (at it, or a preview when the
    whole output was kept for Read: Claude Code's persisted output), the daemon's memory stays
    flat."""
    part = _get(parts, "flood")
    if not isinstance(part, Mapping):
        part = {}
    chars, budget, kept = (
        part.get("result_chars"),
        part.get("budget_chars"),
        part.get("kept_output"),
    )
    within = None
    if chars is not None and budget is not None:
        floor = 0 if kept else budget - AT_BUDGET_SLACK_CHARS
        within = floor <= chars <= budget
    size = f"{part.get('bytes', 0) / (1 << 20):.0f} MiB of output"
    return [
        Metric(
            "flood.result_chars",
            "flood: tool_result size",
            chars,
            "chars",
            f"the budget ({budget}; line cuts may drop < {AT_BUDGET_SLACK_CHARS}), or at most "
            "it as a preview of a kept output",
            within,
            f"{size}; original {part.get('original_chars')} chars, truncated "
            f"{part.get('truncated')}, "
            + ("kept whole for Read (the result is its preview)" if kept else "not kept"),
        ),
        _row(
            "flood.rss_growth_mib",
            "flood: daemon RSS growth",
            part.get("rss_growth_mib"),
            "MiB",
            "<",
            64,
            detail=f"VmRSS sampled every {part.get('sample_ms', '?')} ms; VmHWM "
            f"{part.get('hwm_before_kib')} -> {part.get('hwm_after_kib')} KiB",
        ),
        _info(
            "flood.time_ratio",
            "flood: time / the same command under docker run",
            ratio(part.get("daemon_s"), part.get("docker_run_s")),
            "×",
            f"daemon {_fmt(part.get('daemon_s'), 's')}, docker run "
            f"{_fmt(part.get('docker_run_s'), 's')}",
        ),
    ]


def egress_metrics(parts: Parts) -> list[Metric]:
    """Through the egress proxy against directly, same run: set-up overhead within the OPA
    decision plus 1 ms at p50; tunnelled throughput at least 70%, intercepted at least 40%."""
    part = _get(parts, "egress")
    if not isinstance(part, Mapping):
        part = {}
    direct, proxied = part.get("setup_direct_p50_ms"), part.get("setup_proxy_p50_ms")
    decision = part.get("decision_p50_ms")
    overhead = None if direct is None or proxied is None else proxied - direct
    allowance = None if decision is None else decision + 1.0
    size = f"{part.get('download_bytes', 0) / (1 << 20):.0f} MiB"
    return [
        Metric(
            "egress.setup_overhead_ms",
            "egress: connection set-up through the proxy minus direct, p50",
            overhead,
            "ms",
            f"at most the OPA decision + 1 ms ({_fmt(allowance)})",
            None if overhead is None or allowance is None else overhead <= allowance,
            f"direct {_fmt(direct)}, proxy {_fmt(proxied)}, OPA egress decision {_fmt(decision)} "
            f"for the same connections (asked alone: {_fmt(part.get('decision_alone_p50_ms'))}; "
            f"{part.get('connects')} connections each, in turns)",
        ),
        _row(
            "egress.tunnel_ratio",
            f"egress: {size} download tunnelled / direct",
            ratio(part.get("tunnel_mb_s"), part.get("direct_mb_s")),
            "×",
            ">=",
            0.7,
            detail=f"tunnelled {_fmt(part.get('tunnel_mb_s'), 'MB/s')}, direct "
            f"{_fmt(part.get('direct_mb_s'), 'MB/s')}",
        ),
        _row(
            "egress.intercepted_ratio",
            f"egress: {size} HTTPS download intercepted (credential) / direct HTTPS",
            ratio(part.get("intercepted_mb_s"), part.get("tls_direct_mb_s")),
            "×",
            ">=",
            0.4,
            detail=f"intercepted {_fmt(part.get('intercepted_mb_s'), 'MB/s')}, direct "
            f"{_fmt(part.get('tls_direct_mb_s'), 'MB/s')}",
        ),
    ]


def cpu_metrics(parts: Parts) -> list[Metric]:
    """The daemon's own CPU time (user+sys) per call on each path."""
    rows = []
    for id_, label, part_name in (
        ("cpu.readonly_ms", "daemon CPU per read-only call (user+sys)", "readonly"),
        ("cpu.sandboxed_ms", "daemon CPU per sandboxed call (user+sys)", "churn"),
    ):
        part = _get(parts, part_name)
        value = detail = None
        if isinstance(part, Mapping) and part.get("calls") and part.get("daemon_cpu_s") is not None:
            value = part["daemon_cpu_s"] * 1000 / part["calls"]
            calls = part["calls"]
            others = {
                "child processes (ripgrep)": part.get("daemon_children_cpu_s"),
                "the client process": part.get("client_cpu_s"),
                "OPA": part.get("opa_cpu_s"),
            }
            detail = f"{part['daemon_cpu_s']:.2f} s over {calls} calls; per call also " + ", ".join(
                f"{name} {seconds * 1000 / calls:.2f} ms"
                for name, seconds in others.items()
                if seconds is not None
            )
        rows.append(_info(id_, label, value, "ms", detail or ""))
    floor = _get(parts, "floor")
    check_ms = None
    if isinstance(floor, Mapping) and floor.get("calls") and floor.get("daemon_cpu_s") is not None:
        check_ms = floor["daemon_cpu_s"] * 1000 / floor["calls"]
    rows.append(
        _row(
            "cpu.readonly_ratio",
            "daemon CPU per read-only call / per bare health Check",
            ratio(rows[0].value, check_ms),
            "×",
            "<=",
            2,
            detail=f"{_fmt(rows[0].value)} against {_fmt(check_ms)} per Check",
        )
    )
    return rows


def mcp_metrics(parts: Parts) -> list[Metric]:
    """An upstream MCP tool through tooljail against the same server directly, same run: the
    overhead at p50 and p99 (the issue sets no number; measured and shown)."""
    part = _get(parts, "mcp")
    if not isinstance(part, Mapping):
        part = {}
    rows = []
    for quantile in ("p50", "p99"):
        direct = part.get(f"direct_{quantile}_ms")
        through = part.get(f"tooljail_{quantile}_ms")
        overhead = None if direct is None or through is None else through - direct
        rows.append(
            _info(
                f"mcp.overhead_{quantile}_ms",
                f"upstream MCP tool call through tooljail minus direct (SDK client), {quantile}",
                overhead,
                "ms",
                f"through tooljail {_fmt(through)}, direct {_fmt(direct)} "
                f"({part.get('calls')} calls each, in turns)",
            )
        )
    return rows


def evaluate(parts: Parts) -> list[Metric]:
    """Every metric row, in the issue's order."""
    return [
        *decision_metrics(parts),
        *readonly_metrics(parts),
        *floor_metrics(parts),
        *sandbox_metrics(parts),
        *churn_metrics(parts),
        *batch_metrics(parts),
        *flood_metrics(parts),
        *egress_metrics(parts),
        *mcp_metrics(parts),
        *cpu_metrics(parts),
    ]
