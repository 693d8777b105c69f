"""The phase breakdown of a call: the daemon's phase metrics (`tooljail_call_phase_seconds`, one
histogram per tool and phase) read before and after a part, the mean of each phase over the calls
in between, and what the client saw beyond them (gRPC, protobuf, the socket)."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Mapping
from typing import Any

#: The daemon's marks (sandbox/timeline.py) in the order a sandboxed call makes them, with what
#: each phase is: the time from the mark before it to its own.
PHASES: tuple[tuple[str, str], ...] = (
    ("prepare", "session looked up, input validated, queued for its turn"),
    ("hooks", "PreToolUse hooks (none configured here)"),
    ("decision", "policy decision"),
    ("audit", "audit line written before the run"),
    ("tool", "the tool's own preparation (for Bash: the command's analysis, its directory)"),
    ("pool_take", "a warm container taken from the pool"),
    ("cold_start", "a container created and started (no warm one)"),
    ("sent", "request frame written to the container's attach socket"),
    ("runner_received", "the runner read and decoded the request"),
    ("runner_spawned", "bash spawned as the sandbox identity"),
    ("runner_exited", "the command: bash's start, `echo hi`, its exit"),
    ("runner_answered", "the runner wrote its result"),
    ("result", "the result frame reached the daemon and was decoded"),
    ("tool_end", "the tool mapped the result"),
    ("answer", "PostToolUse hooks, fitting to the budget, the report"),
    ("audit_answer", "audit line of the answer"),
)
#: The phases a warm call spends in the container and on the way to and from it: its floor as
#: long as every call gets a fresh container reached through the engine's attach stream.
CONTAINER_PHASES = (
    "sent",
    "runner_received",
    "runner_spawned",
    "runner_exited",
    "runner_answered",
    "result",
)
_SAMPLE = re.compile(
    r'^tooljail_call_phase_seconds_(sum|count)\{phase="([^"]+)",tool="([^"]+)"\} (\S+)$'
)


def scrape(url: str) -> dict[tuple[str, str, str], float]:
    """(tool, phase, sum|count) -> value, from the daemon's /metrics (loopback)."""
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - our own loopback URL
        text = response.read().decode()
    found: dict[tuple[str, str, str], float] = {}
    for line in text.splitlines():
        if match := _SAMPLE.match(line):
            kind, phase, tool = match.group(1), match.group(2), match.group(3)
            found[(tool, phase, kind)] = float(match.group(4))
    return found


def phase_means_ms(
    before: Mapping[tuple[str, str, str], float],
    after: Mapping[tuple[str, str, str], float],
    tool: str,
    calls: int,
) -> dict[str, float]:
    """Mean milliseconds per call of each phase of `tool` between two scrapes, over `calls`
    calls (a phase some calls skip counts as zero for them)."""
    means = {}
    for phase, _ in PHASES:
        total = after.get((tool, phase, "sum"), 0.0) - before.get((tool, phase, "sum"), 0.0)
        if after.get((tool, phase, "count"), 0.0) > before.get((tool, phase, "count"), 0.0):
            means[phase] = total * 1000 / calls
    return means


def breakdown(
    phases_ms: Mapping[str, float],
    client_mean_ms: float | None,
    outside_floor_ms: float | None = None,
) -> dict[str, Any]:
    """The phases, their sum inside the daemon, the rest of what the client waited, and the
    floor of that rest (a health Check started the same way: no tooljail work at all)."""
    inside = sum(phases_ms.values())
    return {
        "phases_ms": dict(phases_ms),
        "daemon_ms": inside,
        "client_mean_ms": client_mean_ms,
        "outside_daemon_ms": None if client_mean_ms is None else client_mean_ms - inside,
        "outside_floor_ms": outside_floor_ms,
    }


def warm_floor_ms(
    found: Mapping[str, Any] | None, opa_ms: float | None
) -> tuple[float, float, float] | None:
    """What no warm sandboxed call can go under here: (a health Check's round trip started as the
    calls are, one OPA decision, the container's own phases), from one breakdown and an OPA p50
    of the same run; None when one is missing."""
    if not found or opa_ms is None or found.get("outside_floor_ms") is None:
        return None
    phases_ms = found.get("phases_ms") or {}
    if not all(phase in phases_ms for phase in CONTAINER_PHASES):
        return None
    container = sum(phases_ms[phase] for phase in CONTAINER_PHASES)
    return float(found["outside_floor_ms"]), opa_ms, container
