"""Metrics scraped over HTTP from 127.0.0.1 and parsed with prometheus-client's own parser."""

from __future__ import annotations

import asyncio
import socket
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from daemon.errors import TooljailError
from daemon.models import (
    Decision,
    ExecuteOutcome,
    ExecutionReport,
    Outcome,
    TextContent,
    ToolResult,
)
from daemon.ops.metrics import (
    MAX_TOOL_LABELS,
    CallOutcome,
    CancelReason,
    Metrics,
    MetricsServer,
)
from sandbox.executor import ExecutorStats

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]

# Straight to loopback, whatever proxy the environment names.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _scrape(server: MetricsServer) -> tuple[Samples, dict[str, str]]:
    """Every sample by (name, labels), and every family's type by name."""
    with _OPENER.open(f"http://127.0.0.1:{server.port}/metrics", timeout=5) as response:
        assert response.status == 200
        text = response.read().decode()
    samples: Samples = {}
    types: dict[str, str] = {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples, types


def _value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


@pytest.fixture
def metrics() -> Metrics:
    metrics = Metrics(process_metrics=False)
    metrics.set_known_tools(["Read", "Bash", "Edit"])
    return metrics


@pytest.fixture
def server(metrics: Metrics) -> Iterator[MetricsServer]:
    running = metrics.start_http_server("127.0.0.1", 0)
    try:
        yield running
    finally:
        running.close()


def _answer(
    outcome: Outcome | None, *, is_error: bool = False, replayed: bool = False
) -> ExecuteOutcome:
    return ExecuteOutcome(
        result=ToolResult(
            tool_use_id="toolu_1", content=(TextContent(text="x"),), is_error=is_error
        ),
        decision=Decision(outcome=outcome),
        report=ExecutionReport(replayed=replayed),
    )


def test_calls_latencies_and_truncations_are_scraped(
    metrics: Metrics, server: MetricsServer
) -> None:
    metrics.observe_call("Read", CallOutcome.OK, decision_s=0.003, exec_s=0.02)
    metrics.observe_call(
        "Read", CallOutcome.OK, decision_s=0.004, exec_s=0.03, truncated=True, decision_reused=True
    )
    metrics.observe_call("Bash", CallOutcome.ERROR, decision_s=0.2, exec_s=42.0)
    metrics.observe_call("Bash", CallOutcome.DENIED, decision_s=0.002)
    metrics.observe_call("Reed", CallOutcome.INVALID)  # a tool name the model made up

    samples, types = _scrape(server)

    assert types["tooljail_calls"] == "counter"
    assert _value(samples, "tooljail_calls_total", tool="Read", outcome="ok") == 2
    assert _value(samples, "tooljail_calls_total", tool="Bash", outcome="error") == 1
    assert _value(samples, "tooljail_calls_total", tool="Bash", outcome="denied") == 1
    assert _value(samples, "tooljail_calls_total", tool="other", outcome="invalid") == 1

    assert types["tooljail_decision_duration_seconds"] == "histogram"
    assert _value(samples, "tooljail_decision_duration_seconds_count") == 4
    assert _value(samples, "tooljail_decision_duration_seconds_bucket", le="0.005") == 3
    assert _value(samples, "tooljail_decision_duration_seconds_sum") == pytest.approx(0.209)

    assert _value(samples, "tooljail_execution_duration_seconds_count", tool="Read") == 2
    assert _value(samples, "tooljail_execution_duration_seconds_count", tool="Bash") == 1
    buckets = "tooljail_execution_duration_seconds_bucket"
    assert _value(samples, buckets, tool="Bash", le="30.0") == 0
    assert _value(samples, buckets, tool="Bash", le="60.0") == 1

    assert _value(samples, "tooljail_result_truncations_total", tool="Read") == 1
    assert ("tooljail_result_truncations_total", frozenset({("tool", "Bash")})) not in samples
    assert _value(samples, "tooljail_decisions_reused_total") == 1


def test_call_phases_are_histograms_by_tool_and_phase(
    metrics: Metrics, server: MetricsServer
) -> None:
    metrics.observe_phases("Bash", [("decision", 0.002), ("pool_take", 0.0001)])
    metrics.observe_phases("Bash", [("decision", 0.004), ("runner_exited", 0.003)])
    metrics.observe_phases("Reed", [("prepare", 0.001)])  # a made-up tool: one bounded label

    samples, types = _scrape(server)

    assert types["tooljail_call_phase_seconds"] == "histogram"
    name = "tooljail_call_phase_seconds"
    assert _value(samples, f"{name}_count", tool="Bash", phase="decision") == 2
    assert _value(samples, f"{name}_sum", tool="Bash", phase="decision") == pytest.approx(0.006)
    assert _value(samples, f"{name}_bucket", tool="Bash", phase="decision", le="0.0025") == 1
    assert _value(samples, f"{name}_count", tool="Bash", phase="runner_exited") == 1
    assert _value(samples, f"{name}_count", tool="other", phase="prepare") == 1


def test_cancelled_calls_are_counted_as_such(metrics: Metrics, server: MetricsServer) -> None:
    metrics.call_cancelled("Bash", CancelReason.DEADLINE)
    metrics.call_cancelled("Bash", CancelReason.DEADLINE)
    metrics.call_cancelled("Edit", CancelReason.SHUTDOWN)

    samples, _ = _scrape(server)

    assert _value(samples, "tooljail_calls_cancelled_total", tool="Bash", reason="deadline") == 2
    assert _value(samples, "tooljail_calls_cancelled_total", tool="Edit", reason="shutdown") == 1
    assert _value(samples, "tooljail_calls_total", tool="Bash", outcome="cancelled") == 2


def test_in_flight_opa_errors_reloads_and_build_info(
    metrics: Metrics, server: MetricsServer
) -> None:
    metrics.opa_error()
    metrics.policy_reloaded(ok=True)
    metrics.policy_reloaded(ok=False)
    metrics.policy_reloaded(ok=False)
    with metrics.in_flight(), metrics.in_flight():
        during, _ = _scrape(server)
    after, types = _scrape(server)

    assert types["tooljail_calls_in_flight"] == "gauge"
    assert _value(during, "tooljail_calls_in_flight") == 2
    assert _value(after, "tooljail_calls_in_flight") == 0
    assert _value(after, "tooljail_opa_errors_total") == 1
    assert _value(after, "tooljail_policy_reloads_total", result="ok") == 1
    assert _value(after, "tooljail_policy_reloads_total", result="failed") == 2
    build = [key for key in after if key[0] == "tooljail_build_info"]
    assert len(build) == 1
    assert dict(build[0][1])["version"]


def test_in_flight_is_released_when_the_call_raises(
    metrics: Metrics, server: MetricsServer
) -> None:
    with pytest.raises(RuntimeError), metrics.in_flight():
        raise RuntimeError("boom")
    samples, _ = _scrape(server)
    assert _value(samples, "tooljail_calls_in_flight") == 0


def test_sandbox_counters_are_read_at_scrape_time(metrics: Metrics, server: MetricsServer) -> None:
    before, types = _scrape(server)
    assert _value(before, "tooljail_sandbox_pool_ready") == 0  # no executor yet: zeros
    assert types["tooljail_sandbox_pool_misses"] == "counter"

    current = ExecutorStats(
        pool_hits=7,
        pool_misses=3,
        started=9,
        removed=6,
        reaped=1,
        pooled=2,
        in_flight=1,
        memory_held_mb=512,
        memory_budget_mb=2048,
        memory_refused=2,
    )
    metrics.watch_sandbox(lambda: current)
    metrics.containers_reaped(4)  # leftovers of a predecessor, removed at start-up
    samples, _ = _scrape(server)

    assert _value(samples, "tooljail_sandbox_pool_ready") == 2
    assert _value(samples, "tooljail_sandbox_containers_busy") == 1
    assert _value(samples, "tooljail_sandbox_pool_hits_total") == 7
    assert _value(samples, "tooljail_sandbox_pool_misses_total") == 3
    assert _value(samples, "tooljail_sandbox_containers_started_total") == 9
    assert _value(samples, "tooljail_sandbox_containers_removed_total") == 6
    assert _value(samples, "tooljail_sandbox_containers_reaped_total") == 5
    assert _value(samples, "tooljail_sandbox_memory_held_bytes") == 512 << 20
    assert _value(samples, "tooljail_sandbox_memory_budget_bytes") == 2048 << 20
    assert _value(samples, "tooljail_sandbox_memory_refused_total") == 2


async def test_sandbox_counters_are_read_on_the_event_loop(metrics: Metrics) -> None:
    loop = asyncio.get_running_loop()
    readers: list[asyncio.AbstractEventLoop] = []

    def stats() -> ExecutorStats:
        readers.append(asyncio.get_running_loop())  # raises off the loop thread
        return ExecutorStats(pooled=4)

    metrics.watch_sandbox(stats, loop)
    server = metrics.start_http_server("127.0.0.1", 0)
    try:
        samples, _ = await asyncio.to_thread(_scrape, server)
    finally:
        server.close()
    assert _value(samples, "tooljail_sandbox_pool_ready") == 4
    assert readers == [loop]


def test_each_instance_has_its_own_registry() -> None:
    first, second = Metrics(process_metrics=False), Metrics(process_metrics=False)
    first.set_known_tools(["Read"])
    first.observe_call("Read", CallOutcome.OK)
    labels = {"tool": "Read", "outcome": "ok"}
    assert first.registry.get_sample_value("tooljail_calls_total", labels) == 1
    assert second.registry.get_sample_value("tooljail_calls_total", labels) is None


def test_process_metrics_are_exported_when_asked() -> None:
    metrics = Metrics()
    assert metrics.registry.get_sample_value("process_open_fds") is not None


def test_names_the_model_made_up_are_never_labels() -> None:
    """Attack: the daemon counted the first 64 tool names it saw, whatever they were, so a model
    could plant long secrets as labels (read by any local user, gigabytes per scrape) and push
    the real tools into "other" for the daemon's lifetime."""
    metrics = Metrics(process_metrics=False)
    assert metrics.tool_label("sk_live_SECRET") == "other"  # nothing is known yet
    metrics.set_known_tools(["Read", "Bash"])
    for index in range(100):
        metrics.observe_call(f"made_up_{index}_" + "X" * 10_000, CallOutcome.INVALID)
        metrics.observe_phases(f"made_up_{index}", [("prepare", 0.001)])
    assert metrics.tool_label("Read") == "Read"
    text = generate_latest(metrics.registry).decode()
    assert "made_up" not in text
    assert len(text) < 50_000
    labels = {"tool": "other", "outcome": "invalid"}
    assert metrics.registry.get_sample_value("tooljail_calls_total", labels) == 100


def test_known_tools_follow_the_registry_and_stay_bounded() -> None:
    metrics = Metrics(process_metrics=False)
    metrics.set_known_tools(["Read", "mcp__docs__search"])
    assert metrics.tool_label("mcp__docs__search") == "mcp__docs__search"
    metrics.set_known_tools(["Read"])  # the upstream server went away
    assert metrics.tool_label("mcp__docs__search") == "other"
    metrics.set_known_tools(["T" * 1000, *(f"Tool{i}" for i in range(1000))])
    assert metrics.tool_label("T" * 1000) == "other"  # longer than a label may be
    known = {metrics.tool_label(f"Tool{i}") for i in range(1000)}
    # Read and mcp__docs__search were labelled before: their series stay, and count.
    assert len(known - {"other"}) == MAX_TOOL_LABELS - 2


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (_answer(Outcome.ALLOW), CallOutcome.OK),
        (_answer(Outcome.ALLOW, is_error=True), CallOutcome.ERROR),
        (_answer(Outcome.DENY, is_error=True), CallOutcome.DENIED),
        (_answer(Outcome.ASK, is_error=True), CallOutcome.ASK),
        (_answer(None, is_error=True), CallOutcome.INVALID),
        (_answer(Outcome.ALLOW, replayed=True), CallOutcome.REPLAYED),
    ],
)
def test_call_outcome_of_an_answer(answer: ExecuteOutcome, expected: CallOutcome) -> None:
    assert CallOutcome.of(answer) is expected


def test_a_port_in_use_is_a_clear_error(metrics: Metrics) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(TooljailError, match=f"cannot serve metrics on 127.0.0.1:{port}"):
            metrics.start_http_server("127.0.0.1", port)


def test_labels_stay_bounded_over_the_daemon_life_whatever_the_registry_becomes() -> None:
    """Attack: an upstream server's listing changed to 50 new names at a time, each set labelled
    in turn: series grew without bound (55,200 lines after a few rounds)."""
    metrics = Metrics(process_metrics=False)
    labelled: set[str] = set()
    for round_ in range(20):
        names = [f"churn_{round_}_{i}" for i in range(50)]
        metrics.set_known_tools(["Read", *names])
        labelled |= {metrics.tool_label(name) for name in ["Read", *names]}
    assert len(labelled - {"other"}) == MAX_TOOL_LABELS
    assert metrics.tool_label("Read") == "Read"
