"""Where a sandboxed call's time goes, against the real daemon, OPA and Docker: every phase of
the timeline (sandbox/timeline.py) is in the phase metrics, the runner's marks among them, and
together they fit inside the time the caller waited."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from bench.phases import CONTAINER_PHASES
from tests.integration.harness import RunningDaemon, text_of

pytestmark = [pytest.mark.integration, pytest.mark.docker]

# The container's phases as the benchmark's floor of a warm call adds them up.
SANDBOXED_PHASES = (
    "prepare",
    "hooks",
    "decision",
    "audit",
    "tool",
    *CONTAINER_PHASES,
    "tool_end",
    "answer",
    "audit_answer",
)


def _phase(daemon: RunningDaemon, tool: str, phase: str, kind: str) -> float:
    value = daemon.daemon.metrics.registry.get_sample_value(
        f"tooljail_call_phase_seconds_{kind}", {"tool": tool, "phase": phase}
    )
    return value or 0.0


def test_a_sandboxed_call_reports_every_phase_runner_marks_included(
    sandbox_daemon: RunningDaemon, sandbox_dir: Path
) -> None:
    phases = (*SANDBOXED_PHASES, "pool_take", "cold_start")
    counts = {p: _phase(sandbox_daemon, "Bash", p, "count") for p in phases}
    sums = {p: _phase(sandbox_daemon, "Bash", p, "sum") for p in phases}

    started = time.monotonic()
    response = sandbox_daemon.execute(
        "Bash", {"command": "sleep 0.3; echo hi", "description": "phases"}
    )
    waited = time.monotonic() - started
    assert text_of(response).strip() == "hi", text_of(response)

    new = {p: _phase(sandbox_daemon, "Bash", p, "count") - counts[p] for p in phases}
    spent = {p: _phase(sandbox_daemon, "Bash", p, "sum") - sums[p] for p in phases}
    assert all(new[p] == 1 for p in SANDBOXED_PHASES), new
    # A container came from the pool or was started for the call: exactly one of the two.
    assert new["pool_take"] + new["cold_start"] == 1, new
    # The command's own time is the runner's, between its spawn and its exit marks.
    assert spent["runner_exited"] >= 0.3
    assert sum(spent.values()) <= waited


def test_a_read_only_call_reports_its_phases_without_sandbox_ones(
    sandbox_daemon: RunningDaemon, sandbox_dir: Path
) -> None:
    (sandbox_dir / "f.txt").write_text("x\n")
    before = {
        p: _phase(sandbox_daemon, "Read", p, "count") for p in ("decision", "tool_end", "sent")
    }
    response = sandbox_daemon.execute("Read", {"file_path": str(sandbox_dir / "f.txt")})
    assert not response.result.is_error, text_of(response)
    assert _phase(sandbox_daemon, "Read", "decision", "count") == before["decision"] + 1
    assert _phase(sandbox_daemon, "Read", "tool_end", "count") == before["tool_end"] + 1
    assert _phase(sandbox_daemon, "Read", "sent", "count") == before["sent"]


def test_a_made_up_tool_name_never_reaches_the_metrics(
    sandbox_daemon: RunningDaemon, sandbox_dir: Path
) -> None:
    """Attack: the first 64 names a model sent became labels (secrets readable by any local
    user, gigabytes per scrape, the real tools then counted as "other")."""
    for index in range(70):
        response = sandbox_daemon.execute(f"sk_live_SECRET_{index}_" + "X" * 200, {"x": 1})
        assert response.result.is_error
    (sandbox_dir / "g.txt").write_text("x\n")
    sandbox_daemon.execute("Read", {"file_path": str(sandbox_dir / "g.txt")})
    scraped = generate_latest(sandbox_daemon.daemon.metrics.registry).decode()
    assert "sk_live" not in scraped
    assert 'tool="Read"' in scraped
    assert 'outcome="invalid",tool="other"' in scraped
