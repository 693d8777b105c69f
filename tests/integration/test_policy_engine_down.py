"""OPA killed mid-test: calls fail closed with a reason naming the policy engine, then recover
when the daemon's supervisor has restarted it — without restarting the daemon."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from tests.integration.harness import running_daemon, text_of

pytestmark = pytest.mark.integration


def _wait_for(predicate: object, timeout_s: float = 120.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


def _stopped(pid: int) -> bool:
    """Whether every thread of `pid` is stopped (state T in /proc)."""
    try:
        stats = [(entry / "stat").read_text() for entry in Path(f"/proc/{pid}/task").iterdir()]
    except FileNotFoundError:  # a thread ended while they were read: look again
        return False
    return all(stat.rsplit(")", 1)[1].split()[0] == "T" for stat in stats)


def _stop(pid: int) -> None:
    """SIGSTOP `pid` and wait until it has taken effect. kill() returns once the signal is queued:
    the process stops only when one of its threads runs and takes it, and on a busy host OPA was
    seen answering a query 7 ms after kill() had returned."""
    os.kill(pid, signal.SIGSTOP)
    assert _wait_for(lambda: _stopped(pid), 30.0), f"OPA (pid {pid}) did not stop"


def test_opa_killed_fails_closed_then_recovers(short_tmp: Path) -> None:
    workspace = short_tmp / "ws-opa-kill"
    workspace.mkdir()
    target = workspace / "hello.txt"
    target.write_text("hello\n")
    with running_daemon(workspace, short_tmp / "opakill.sock", sandbox={"enabled": False}) as d:
        assert d.daemon.opa is not None
        before = d.execute("Read", {"file_path": str(target)})
        assert before.decision.outcome == pb.ALLOW and "hello" in text_of(before)

        first_pid = d.daemon.opa.pid
        assert first_pid is not None
        # Stop OPA first so the outage is certain to be observed, then kill it for real.
        _stop(first_pid)
        # Another input than before: the policy lets the daemon reuse the decision of an
        # identical read-only call, and this one must be asked of the stopped OPA.
        down = d.execute("Read", {"file_path": str(target), "limit": 5}, tool_use_id="toolu_down")
        assert down.result.is_error
        assert down.decision.outcome == pb.DENY
        assert "policy engine" in text_of(down) and "fail closed" in text_of(down)
        assert "hello" not in text_of(down)
        os.kill(first_pid, signal.SIGKILL)

        def recovered() -> bool:
            opa = d.daemon.opa
            if opa is None or opa.pid in (None, first_pid) or opa.restarts < 1:
                return False
            return d.execute("Read", {"file_path": str(target)}).decision.outcome == pb.ALLOW

        assert _wait_for(recovered), "the daemon did not restart OPA"
        after = d.execute("Read", {"file_path": str(target)})
        assert not after.result.is_error and "hello" in text_of(after)
        assert d.daemon.opa.restarts >= 1
        audit = {r["tool_use_id"]: r for r in d.audit_lines()}
        assert audit["toolu_down"]["outcome"] == "deny"


def test_a_stopped_opa_is_noticed_though_no_query_fails(short_tmp: Path) -> None:
    """Attacker round 102: with OPA stopped, a call identical to one allowed a moment before was
    allowed from the reused decision, and went on being so while no query failed. The daemon
    looks at OPA's health between queries, and forgets what it may reuse once OPA does not
    answer."""
    workspace = short_tmp / "ws-opa-stop"
    workspace.mkdir()
    target = workspace / "hello.txt"
    target.write_text("hello\n")
    with running_daemon(workspace, short_tmp / "opastop.sock", sandbox={"enabled": False}) as d:
        engine, opa = d.daemon.engine, d.daemon.opa
        assert engine is not None and opa is not None and opa.pid is not None
        d.execute("Read", {"file_path": str(target)}, tool_use_id="toolu_first")
        d.execute("Read", {"file_path": str(target)}, tool_use_id="toolu_reused")
        audit = {r["tool_use_id"]: r for r in d.audit_lines()}
        assert audit["toolu_reused"].get("decision_cached_from"), "the shipped policy reuses it"
        pid = opa.pid
        _stop(pid)
        try:
            assert _wait_for(lambda: len(engine.cache) == 0, 60.0), "the stop went unnoticed"
            down = d.execute("Read", {"file_path": str(target)}, tool_use_id="toolu_down")
        finally:
            os.kill(pid, signal.SIGCONT)
        assert down.decision.outcome == pb.DENY and "fail closed" in text_of(down)
        assert "hello" not in text_of(down)
