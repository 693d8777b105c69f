"""Prometheus metrics: what an operator graphs and alerts on, served over HTTP.

Every call ends in exactly one of `Metrics.observe_call` (it was answered through the pipeline)
or `Metrics.call_cancelled` (its execution was cut short), so `tooljail_calls_total` counts each
call once. The sandbox's own counters are read from the executor at scrape time instead of being
pushed, so the sandbox package needs no knowledge of metrics.

Each `Metrics` owns its registry (never the process-wide default), so tests and embedders can
make as many as they like.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from enum import StrEnum
from importlib import metadata
from typing import Generic, TypeVar
from wsgiref.simple_server import WSGIServer

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector
from tooljail.connection import loopback_host

from daemon.errors import TooljailError
from daemon.models import ExecuteOutcome, Outcome
from sandbox.executor import ExecutorStats

_MIB = 1 << 20

log = logging.getLogger(__name__)

NAMESPACE = "tooljail"
#: Label value for a tool name outside the known set (names come from the model: unbounded).
OTHER_TOOL = "other"
#: Tool names used as labels at most (the registry's first ones; the rest count as OTHER_TOOL).
MAX_TOOL_LABELS = 64
#: A longer tool name is counted as OTHER_TOOL: every series repeats its labels on each scrape.
MAX_TOOL_LABEL_CHARS = 128
#: How long a scrape waits for the event loop to hand over the sandbox counters.
_SNAPSHOT_TIMEOUT_S = 2.0

# Policy decisions take milliseconds (a local OPA), the 0.5 s default timeout bounds them.
DECISION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
# From a Read of a small file to a Bash call at its ten-minute ceiling.
EXECUTION_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
)  # fmt: skip

# Most phases take tens of microseconds to a few milliseconds; a command runs for up to minutes.
PHASE_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 2.5, 10.0, 60.0,
)  # fmt: skip


class CallOutcome(StrEnum):
    """How one call ended, as the `outcome` label of tooljail_calls_total."""

    OK = "ok"
    """Allowed, ran, and the tool_result is not an error."""
    ERROR = "error"
    """Allowed and ran, but the tool_result is an error (non-zero exit, file not found...)."""
    DENIED = "denied"
    """The policy denied it; nothing ran."""
    ASK = "ask"
    """The policy wants a human's approval first; nothing ran."""
    INVALID = "invalid"
    """Never reached the policy: unknown tool or invalid input."""
    REPLAYED = "replayed"
    """Answered from memory (a retried tool_use id); nothing ran now."""
    CANCELLED = "cancelled"
    """Cut short; `tooljail_calls_cancelled_total` says why."""

    @classmethod
    def of(cls, answer: ExecuteOutcome) -> CallOutcome:
        """The outcome of an answered call."""
        if answer.report.replayed:
            return cls.REPLAYED
        match answer.decision.outcome:
            case None:
                return cls.INVALID
            case Outcome.DENY:
                return cls.DENIED
            case Outcome.ASK:
                return cls.ASK
            case Outcome.ALLOW:
                return cls.ERROR if answer.result.is_error else cls.OK


class CancelReason(StrEnum):
    """Why a call was cut short (the `reason` label of tooljail_calls_cancelled_total)."""

    DEADLINE = "deadline"
    """The caller's gRPC deadline passed."""
    CLIENT = "client"
    """The caller cancelled the RPC or went away."""
    SESSION_CLOSED = "session_closed"
    """Its session was closed."""
    SIBLING_FAILED = "sibling_failed"
    """A parallel Bash call of the same batch failed."""
    SHUTDOWN = "shutdown"
    """The daemon stopped and the grace period ran out."""


def _version() -> str:
    try:
        return metadata.version("tooljail")
    except metadata.PackageNotFoundError:
        return "unknown"


@dataclass
class MetricsServer:
    """A running /metrics HTTP endpoint."""

    host: str
    port: int
    """The bound port (the chosen one when 0 was asked for)."""
    _httpd: WSGIServer
    _thread: threading.Thread

    def close(self) -> None:
        """Stop serving and release the port."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


_Labelled = TypeVar("_Labelled", Counter, Histogram)


class _Children(Generic[_Labelled]):
    """A labelled metric's children, kept by their label values: prometheus_client's `labels`
    checks and locks on every call (2% of the daemon's CPU per read-only call, profiled). Label
    values are bounded (tool_label, phases, outcomes) and no child is ever removed."""

    def __init__(self, metric: _Labelled) -> None:
        self._metric: _Labelled = metric
        self._kept: dict[tuple[str, ...], _Labelled] = {}

    def __call__(self, *values: str) -> _Labelled:
        child = self._kept.get(values)
        if child is None:
            # Two threads may both get here: labels() hands both the same child.
            child = self._kept[values] = self._metric.labels(*values)
        return child


class Metrics:
    """The daemon's metrics and the small typed API the pipeline calls.

    Tools are counted by name only once `set_known_tools` named them (the registry's); until
    then, and for any other name, as "other".

    Args:
        process_metrics: Also export process_* (CPU, memory, open files) from /proc.
    """

    def __init__(self, *, process_metrics: bool = True) -> None:
        self.registry = CollectorRegistry()
        self._known_tools: frozenset[str] = frozenset()
        self._ever_labelled: set[str] = set()
        r = self.registry
        self._calls = Counter(
            "calls", "Tool calls by tool and outcome.", ["tool", "outcome"],
            namespace=NAMESPACE, registry=r,
        )  # fmt: skip
        self._cancelled = Counter(
            "calls_cancelled", "Tool calls cut short, by tool and reason.", ["tool", "reason"],
            namespace=NAMESPACE, registry=r,
        )  # fmt: skip
        self._decision = Histogram(
            "decision_duration_seconds", "Time to get a policy decision.",
            namespace=NAMESPACE, buckets=DECISION_BUCKETS, registry=r,
        )  # fmt: skip
        self._execution = Histogram(
            "execution_duration_seconds", "Time to execute an allowed call, by tool.", ["tool"],
            namespace=NAMESPACE, buckets=EXECUTION_BUCKETS, registry=r,
        )  # fmt: skip
        self._phases = Histogram(
            "call_phase_seconds",
            "Where the time of answered calls went, by tool and phase (sandbox/timeline.py: "
            "decision, pool_take, runner_spawned...). A phase's time runs from the mark before it.",
            ["tool", "phase"],
            namespace=NAMESPACE, buckets=PHASE_BUCKETS, registry=r,
        )  # fmt: skip
        self._truncations = Counter(
            "result_truncations", "tool_results cut to fit their budget, by tool.", ["tool"],
            namespace=NAMESPACE, registry=r,
        )  # fmt: skip
        self._opa_errors = Counter(
            "opa_errors", "Policy queries that failed (timeout, unreachable, bad answer).",
            namespace=NAMESPACE, registry=r,
        )  # fmt: skip
        self._reused = Counter(
            "decisions_reused",
            "Calls whose policy decision was reused (the policy's cache_ttl_s) instead of asked "
            "of OPA.",
            namespace=NAMESPACE, registry=r,
        )  # fmt: skip
        self._reloads = Counter(
            "policy_reloads", "Policy reloads by result (ok, failed).", ["result"],
            namespace=NAMESPACE, registry=r,
        )  # fmt: skip
        self._calls_of = _Children(self._calls)
        self._cancelled_of = _Children(self._cancelled)
        self._execution_of = _Children(self._execution)
        self._phases_of = _Children(self._phases)
        self._truncations_of = _Children(self._truncations)
        self._in_flight = Gauge(
            "calls_in_flight", "Tool calls running now.", namespace=NAMESPACE, registry=r
        )
        Info("build", "The running tooljail.", namespace=NAMESPACE, registry=r).info(
            {"version": _version()}
        )
        self._sandbox = _SandboxCollector()
        r.register(self._sandbox)
        if process_metrics:
            ProcessCollector(registry=r)

    def set_known_tools(self, names: Iterable[str]) -> None:
        """The registry's tool names now (called whenever it changes): only these become
        labels. A model can send any name; counted by name, its names would be series every
        scrape repeats and anyone who can scrape reads. Series are never dropped, so the names
        ever labelled are bounded too (an upstream server may list new names every time)."""
        kept = [name for name in names if len(name) <= MAX_TOOL_LABEL_CHARS]
        room = MAX_TOOL_LABELS - len(self._ever_labelled)
        fresh = [name for name in kept if name not in self._ever_labelled][: max(0, room)]
        self._ever_labelled.update(fresh)
        self._known_tools = frozenset(kept) & self._ever_labelled

    def tool_label(self, tool: str) -> str:
        """The label value used for `tool`: its name when the registry has it, else "other"."""
        return tool if tool in self._known_tools else OTHER_TOOL

    def observe_call(
        self,
        tool: str,
        outcome: CallOutcome,
        *,
        decision_s: float | None = None,
        exec_s: float | None = None,
        truncated: bool = False,
        decision_reused: bool = False,
    ) -> None:
        """Count one answered call.

        Args:
            tool: The tool_use's name (as the model sent it).
            outcome: How it ended (`CallOutcome.of(answer)`).
            decision_s: Time the policy decision took; None when the policy was not asked.
            exec_s: Time the execution took; None when nothing ran.
            truncated: The tool_result was cut to fit its budget.
            decision_reused: The decision was a reused one, not asked of OPA.
        """
        label = self.tool_label(tool)
        self._calls_of(label, outcome.value).inc()
        if decision_s is not None:
            self._decision.observe(decision_s)
        if exec_s is not None:
            self._execution_of(label).observe(exec_s)
        if truncated:
            self._truncations_of(label).inc()
        if decision_reused:
            self._reused.inc()

    def observe_phases(self, tool: str, phases: Iterable[tuple[str, float]]) -> None:
        """Count the phases of one answered call (names are the code's marks, a bounded set)."""
        label = self.tool_label(tool)
        for phase, seconds in phases:
            self._phases_of(label, phase).observe(seconds)

    def call_cancelled(self, tool: str, reason: CancelReason) -> None:
        """Count one call cut short (instead of `observe_call`, never in addition to it)."""
        label = self.tool_label(tool)
        self._calls_of(label, CallOutcome.CANCELLED.value).inc()
        self._cancelled_of(label, reason.value).inc()

    @contextlib.contextmanager
    def in_flight(self) -> Iterator[None]:
        """Wrap a call's execution: the in-flight gauge counts it while inside."""
        self._in_flight.inc()
        try:
            yield
        finally:
            self._in_flight.dec()

    def opa_error(self) -> None:
        """Count a policy query that failed (the call was then denied: fail closed)."""
        self._opa_errors.inc()

    def policy_reloaded(self, ok: bool) -> None:
        """Count a policy reload (SIGHUP or the Admin service)."""
        self._reloads.labels("ok" if ok else "failed").inc()

    def containers_reaped(self, count: int) -> None:
        """Count leftovers removed outside the executor (the reap at start-up)."""
        self._sandbox.add_reaped(count)

    def watch_sandbox(
        self,
        stats: Callable[[], ExecutorStats | None],
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        """Export the sandbox executor's counters, read at each scrape.

        Args:
            stats: Returns the executor's counters now (`executor.stats`), or None while there
                is no executor.
            loop: The event loop the executor lives on; scrapes run on the HTTP server's thread
                and read the counters through this loop, so they never race with it.
        """
        self._sandbox.watch(stats, loop)

    def start_http_server(self, host: str = "127.0.0.1", port: int = 9464) -> MetricsServer:
        """Serve these metrics at http://host:port/metrics from a background thread.

        Raises:
            TooljailError: The address cannot be bound.
        """
        try:
            httpd, thread = prometheus_client.start_http_server(
                port, addr=host, registry=self.registry
            )
        except OSError as exc:
            raise TooljailError(
                f"cannot serve metrics on {host}:{port}: {exc}; choose another metrics address "
                "or port in the config, or stop what holds it"
            ) from exc
        bound_port: int = httpd.server_address[1]
        if not loopback_host(host):
            log.warning(
                "metrics are served on %s:%d without authentication; firewall that port",
                host,
                bound_port,
            )
        log.info("metrics on http://%s:%d/metrics", host, bound_port)
        return MetricsServer(host, bound_port, httpd, thread)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class _SandboxCollector:
    """Reads the executor's counters at scrape time."""

    def __init__(self) -> None:
        self._stats: Callable[[], ExecutorStats | None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._extra_reaped = 0
        self._lock = threading.Lock()

    def watch(
        self, stats: Callable[[], ExecutorStats | None], loop: asyncio.AbstractEventLoop | None
    ) -> None:
        with self._lock:
            self._stats, self._loop = stats, loop

    def add_reaped(self, count: int) -> None:
        with self._lock:
            self._extra_reaped += count

    def _snapshot(self) -> ExecutorStats | None:
        """The counters now (zeros without an executor), or None when they cannot be read."""
        with self._lock:
            stats, loop = self._stats, self._loop
        if stats is None:
            return ExecutorStats()
        if loop is None or not loop.is_running() or _running_loop() is loop:
            return stats() or ExecutorStats()

        async def read() -> ExecutorStats:
            return stats() or ExecutorStats()

        future = asyncio.run_coroutine_threadsafe(read(), loop)
        try:
            return future.result(_SNAPSHOT_TIMEOUT_S)
        except FutureTimeout:
            future.cancel()
            log.warning(
                "the event loop did not hand over the sandbox counters within %.0f s; this "
                "scrape has none (a blocked loop is a bug: look for slow synchronous work)",
                _SNAPSHOT_TIMEOUT_S,
            )
            return None

    def describe(self) -> Iterable[Metric]:
        return self._families(ExecutorStats(), 0)

    def collect(self) -> Iterable[Metric]:
        try:
            snapshot = self._snapshot()
        except Exception:
            log.exception("reading the sandbox counters failed; this scrape has none")
            return []
        if snapshot is None:
            # Out of reach: no samples is honest, zeros would look like a counter reset.
            return []
        with self._lock:
            extra_reaped = self._extra_reaped
        return self._families(snapshot, extra_reaped)

    @staticmethod
    def _families(stats: ExecutorStats, extra_reaped: int) -> list[Metric]:
        def counter(name: str, doc: str, value: float) -> Metric:
            return CounterMetricFamily(f"{NAMESPACE}_sandbox_{name}", doc, value=value)

        def gauge(name: str, doc: str, value: float) -> Metric:
            return GaugeMetricFamily(f"{NAMESPACE}_sandbox_{name}", doc, value=value)

        return [
            gauge("pool_ready", "Warm containers ready in the pool now.", stats.pooled),
            gauge("containers_busy", "Containers running a call now.", stats.in_flight),
            gauge(
                "memory_held_bytes",
                "Memory the containers of calls hold now (their limits, until removed).",
                stats.memory_held_mb * _MIB,
            ),
            gauge(
                "memory_budget_bytes",
                "Memory the containers of calls may hold together.",
                stats.memory_budget_mb * _MIB,
            ),
            counter(
                "memory_refused",
                "Calls refused because their container did not fit in the memory budget.",
                stats.memory_refused,
            ),
            counter("pool_hits", "Calls served by a warm container.", stats.pool_hits),
            counter("pool_misses", "Calls that had to start a container.", stats.pool_misses),
            counter("containers_started", "Containers started.", stats.started),
            counter("containers_removed", "Containers removed.", stats.removed),
            counter(
                "containers_reaped",
                "Leftover containers removed (crashed predecessors, lost ones).",
                stats.reaped + extra_reaped,
            ),
        ]
