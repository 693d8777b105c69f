"""An agent that keeps retrying a refused call is stopped, with the real OPA and the shipped
policy: after three denials of the very same call in a session, it is denied with a reason that
tells the model to stop; other calls of the tool, and other sessions, are not affected."""

from __future__ import annotations

import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from tests.integration.harness import RunningDaemon, text_of

pytestmark = pytest.mark.integration


def test_a_call_denied_three_times_is_stopped(host_daemon: RunningDaemon) -> None:
    session = host_daemon.stub.OpenSession(pb.OpenSessionRequest(), timeout=30)
    other = host_daemon.stub.OpenSession(pb.OpenSessionRequest(), timeout=30)
    try:
        inside = f"{session.workspace}/notes.txt"
        with open(inside, "w") as note:
            note.write("hello\n")
        outside = {"file_path": "/etc/shadow"}
        for _ in range(3):
            denied = host_daemon.execute("Read", outside, session_id=session.id)
            assert denied.decision.outcome == pb.DENY and "Stop retrying" not in text_of(denied)
        stopped = host_daemon.execute("Read", outside, session_id=session.id)
        assert stopped.decision.outcome == pb.DENY
        assert "This Read call was already denied 3 times" in text_of(stopped)
        assert "Stop retrying it" in text_of(stopped)
        mine = host_daemon.execute("Read", {"file_path": inside}, session_id=session.id)
        assert mine.decision.outcome == pb.ALLOW and "hello" in text_of(mine)
        theirs = host_daemon.execute("Read", outside, session_id=other.id)
        assert "Stop retrying" not in text_of(theirs), "another session was held back"
    finally:
        for opened in (session, other):
            host_daemon.stub.CloseSession(pb.CloseSessionRequest(session_id=opened.id), timeout=30)
