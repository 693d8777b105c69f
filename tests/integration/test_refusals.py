"""An agent that keeps retrying refused calls is stopped, with the real OPA and the shipped policy:
after five denials of one tool in a session, its further calls are denied with a reason telling
the model to stop; other tools and other sessions are not affected."""

from __future__ import annotations

import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from tests.integration.harness import RunningDaemon, text_of

pytestmark = pytest.mark.integration


def test_five_denials_of_a_tool_stop_it_for_the_session(host_daemon: RunningDaemon) -> None:
    session = host_daemon.stub.OpenSession(pb.OpenSessionRequest(), timeout=30)
    other = host_daemon.stub.OpenSession(pb.OpenSessionRequest(), timeout=30)
    try:
        inside = f"{session.workspace}/notes.txt"
        with open(inside, "w") as note:
            note.write("hello\n")
        for _ in range(5):
            denied = host_daemon.execute(
                "Read", {"file_path": "/etc/shadow"}, session_id=session.id
            )
            assert denied.decision.outcome == pb.DENY and "outside the workspace" in text_of(denied)
        stopped = host_daemon.execute("Read", {"file_path": inside}, session_id=session.id)
        assert stopped.decision.outcome == pb.DENY
        assert "Read was denied 5 times in this session" in text_of(stopped)
        assert "Stop retrying it" in text_of(stopped) and "hello" not in text_of(stopped)
        listed = host_daemon.execute("LS", {"path": session.workspace}, session_id=session.id)
        assert listed.decision.outcome == pb.ALLOW, "another tool was held back"
        theirs = host_daemon.execute(
            "Read", {"file_path": f"{other.workspace}/x.txt"}, session_id=other.id
        )
        assert "Stop retrying" not in text_of(theirs), "another session was held back"
    finally:
        for opened in (session, other):
            host_daemon.stub.CloseSession(pb.CloseSessionRequest(session_id=opened.id), timeout=30)
