"""Permission modes and session-scoped approvals with the real daemon, OPA and Docker."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon._generated.tooljail.v1 import executor_pb2_grpc as pb_grpc
from tests.integration.conftest import OWNER_GID, OWNER_UID
from tests.integration.harness import RunningDaemon, text_of

pytestmark = [pytest.mark.integration, pytest.mark.docker]


def call(
    daemon: RunningDaemon, session: pb.Session, name: str, tool_input: dict[str, object], **kw: str
) -> pb.ExecuteResponse:
    use = pb.ToolUse(id=f"toolu_{uuid.uuid4().hex[:12]}", name=name)
    use.input.update(tool_input)
    response: pb.ExecuteResponse = daemon.stub.Execute(
        pb.ExecuteRequest(session_id=session.id, tool_use=use, **kw), timeout=120
    )
    return response


_OPENED: list[tuple[RunningDaemon, str]] = []


@pytest.fixture(autouse=True)
def _close_opened_sessions() -> Iterator[None]:
    """Sessions left open keep a warm container each for the pool's idle time: tests of other
    files on the same daemon that wait for the containers to go would wait for those too."""
    yield
    while _OPENED:
        daemon, session_id = _OPENED.pop()
        with contextlib.suppress(grpc.RpcError):
            daemon.stub.CloseSession(pb.CloseSessionRequest(session_id=session_id), timeout=60)


def opened(daemon: RunningDaemon, mode: str) -> pb.Session:
    session: pb.Session = daemon.stub.OpenSession(pb.OpenSessionRequest(mode=mode), timeout=30)
    _OPENED.append((daemon, session.id))
    os.chown(session.workspace, OWNER_UID, OWNER_GID)
    return session


CALLS = {
    "read": ("Read", {"file_path": "{ws}/a.txt"}),
    "write": ("Write", {"file_path": "{ws}/new.txt", "content": "x"}),
    "ls": ("Bash", {"command": "ls"}),
    "force_push": ("Bash", {"command": "git push --force origin main"}),
    "sudo": ("Bash", {"command": "sudo ls"}),
}
EXPECTED = {
    "default": {"read": pb.ALLOW, "write": pb.ALLOW, "ls": pb.ALLOW, "force_push": pb.ASK,
                "sudo": pb.DENY},
    "acceptEdits": {"read": pb.ALLOW, "write": pb.ALLOW, "ls": pb.ALLOW, "force_push": pb.ASK,
                    "sudo": pb.DENY},
    "plan": {"read": pb.ALLOW, "write": pb.DENY, "ls": pb.DENY, "force_push": pb.DENY,
             "sudo": pb.DENY},
    "dontAsk": {"read": pb.ALLOW, "write": pb.ALLOW, "ls": pb.ALLOW, "force_push": pb.DENY,
                "sudo": pb.DENY},
}  # fmt: skip


@pytest.mark.parametrize("mode", list(EXPECTED))
def test_each_mode_against_the_same_calls(sandbox_daemon: RunningDaemon, mode: str) -> None:
    session = opened(sandbox_daemon, mode)
    assert session.mode == mode
    (Path(session.workspace) / "a.txt").write_text("a\n")
    seen = {}
    for key, (name, template) in CALLS.items():
        tool_input = {k: str(v).format(ws=session.workspace) for k, v in template.items()}
        seen[key] = call(sandbox_daemon, session, name, tool_input).decision.outcome
    assert seen == EXPECTED[mode], {k: pb.Outcome.Name(v) for k, v in seen.items()}


def test_bypass_permissions_is_refused_when_opening_without_the_principals_setting(
    sandbox_daemon: RunningDaemon,
) -> None:
    with pytest.raises(grpc.RpcError) as refused:
        opened(sandbox_daemon, "bypassPermissions")
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "bypassPermissions" in (refused.value.details() or "")


def test_mode_can_be_changed_by_an_admin(sandbox_daemon: RunningDaemon) -> None:
    session = opened(sandbox_daemon, "plan")
    admin = pb_grpc.AdminStub(sandbox_daemon.channel)
    write = {"file_path": f"{session.workspace}/n.txt", "content": "x"}
    assert call(sandbox_daemon, session, "Write", write).decision.outcome == pb.DENY
    changed = admin.SetSessionMode(
        pb.SetSessionModeRequest(session_id=session.id, mode="default"), timeout=30
    )
    assert changed.mode == "default"
    assert call(sandbox_daemon, session, "Write", write).decision.outcome == pb.ALLOW
    with pytest.raises(grpc.RpcError) as bad:
        admin.SetSessionMode(pb.SetSessionModeRequest(session_id=session.id, mode="yolo"))
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def approve_for_session(
    daemon: RunningDaemon, session: pb.Session, command: str, tool_use_id: str
) -> None:
    """Ask for the Bash command, then send it back with its token for the session scope."""
    use = pb.ToolUse(id=tool_use_id, name="Bash")
    use.input.update({"command": command})
    asked = daemon.stub.Execute(pb.ExecuteRequest(session_id=session.id, tool_use=use), timeout=120)
    assert asked.decision.outcome == pb.ASK, text_of(asked)
    approved = daemon.stub.Execute(
        pb.ExecuteRequest(
            session_id=session.id,
            tool_use=use,
            approval_token=asked.decision.approval_token,
            approval_scope="session",
        ),
        timeout=120,
    )
    assert approved.decision.outcome == pb.ALLOW, text_of(approved)


def test_session_approval_stops_asking_for_the_same_command_only(
    sandbox_daemon: RunningDaemon,
) -> None:
    session = opened(sandbox_daemon, "default")
    approve_for_session(sandbox_daemon, session, "git push --force origin main", "toolu_grant_1")
    grants = pb_grpc.AdminStub(sandbox_daemon.channel).ListGrants(
        pb.ListGrantsRequest(session_id=session.id), timeout=30
    )
    assert [(g.tool, g.pattern) for g in grants.grants] == [("Bash", "git push")]
    again = call(sandbox_daemon, session, "Bash", {"command": "git push -f origin topic"})
    assert again.decision.outcome == pb.ALLOW
    other = call(sandbox_daemon, session, "Bash", {"command": "git reset --hard HEAD~1"})
    assert other.decision.outcome == pb.ASK
    elsewhere = opened(sandbox_daemon, "default")
    fresh = call(sandbox_daemon, elsewhere, "Bash", {"command": "git push -f origin topic"})
    assert fresh.decision.outcome == pb.ASK, "grants die with their session"


def test_a_session_approval_does_not_cover_other_kinds_of_ask(
    sandbox_daemon: RunningDaemon,
) -> None:
    """Attacker round 59: a force push approved for the session let `git push origin --delete
    main` and `git push --mirror` run unasked: the grant lifted every ask of a `git push`."""
    session = opened(sandbox_daemon, "default")
    approve_for_session(sandbox_daemon, session, "git push --force origin main", "toolu_grant_k")
    for command in ("git push origin --delete main", "git push --mirror backup"):
        other = call(sandbox_daemon, session, "Bash", {"command": command})
        assert other.decision.outcome == pb.ASK, (command, text_of(other))
    same = call(sandbox_daemon, session, "Bash", {"command": "git push -f origin topic"})
    assert same.decision.outcome == pb.ALLOW, text_of(same)
