"""Sessions over gRPC: fresh workspaces, isolation between sessions, close, unknown sessions."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon.server import service as service_module
from tests.integration.harness import RunningDaemon, text_of

pytestmark = pytest.mark.integration


def open_session(daemon: RunningDaemon, **kw: object) -> pb.Session:
    session: pb.Session = daemon.stub.OpenSession(pb.OpenSessionRequest(**kw), timeout=30)
    return session


def test_sessions_have_their_own_workspaces_and_cannot_read_each_other(
    host_daemon: RunningDaemon,
) -> None:
    first = open_session(host_daemon)
    second = open_session(host_daemon, idle_ttl_s=120)
    assert first.id != second.id and first.workspace != second.workspace
    assert Path(first.workspace).is_dir() and Path(second.workspace).is_dir()
    assert second.idle_ttl_s == 120
    secret = Path(first.workspace) / "secret.txt"
    secret.write_text("only for the first session\n")

    mine = host_daemon.execute("Read", {"file_path": str(secret)}, session_id=first.id)
    assert not mine.result.is_error and "only for the first" in text_of(mine)
    theirs = host_daemon.execute("Read", {"file_path": str(secret)}, session_id=second.id)
    assert theirs.result.is_error and theirs.decision.outcome == pb.DENY
    assert "outside the workspace" in text_of(theirs)
    assert "only for the first" not in text_of(theirs)
    default = host_daemon.execute("Read", {"file_path": str(secret)})
    assert default.result.is_error and "only for the first" not in text_of(default)


def test_close_session_forgets_it_and_can_delete_its_workspace(
    host_daemon: RunningDaemon,
) -> None:
    session = open_session(host_daemon)
    (Path(session.workspace) / "f.txt").write_text("x\n")
    closed = host_daemon.stub.CloseSession(
        pb.CloseSessionRequest(session_id=session.id, delete_workspace=True), timeout=30
    )
    assert closed.workspace_deleted and not Path(session.workspace).exists()
    with pytest.raises(grpc.RpcError) as gone:
        host_daemon.execute("LS", {"path": session.workspace}, session_id=session.id)
    assert gone.value.code() == grpc.StatusCode.NOT_FOUND
    assert "unknown session" in gone.value.details()
    kept = open_session(host_daemon)
    host_daemon.stub.CloseSession(pb.CloseSessionRequest(session_id=kept.id), timeout=30)
    assert Path(kept.workspace).is_dir(), "the workspace is kept unless asked otherwise"


def test_session_errors_are_statuses(host_daemon: RunningDaemon, tmp_path: Path) -> None:
    with pytest.raises(grpc.RpcError) as default:
        host_daemon.stub.CloseSession(pb.CloseSessionRequest(session_id="default"), timeout=30)
    assert default.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as unknown:
        host_daemon.stub.CloseSession(pb.CloseSessionRequest(session_id="ses_nope"), timeout=30)
    assert unknown.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError) as relative:
        open_session(host_daemon, workspace="relative/dir")
    assert relative.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as refused:
        open_session(host_daemon, workspace=str(tmp_path))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "policy does not allow" in refused.value.details()


def _sessions_open(daemon: RunningDaemon) -> int:
    count: int = daemon._run(daemon.daemon.status()).sessions
    return count


def _eventually(check: Callable[[], bool], timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_session_whose_request_gave_up_while_it_opened_is_closed_with_its_workspace(
    host_daemon: RunningDaemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = host_daemon.daemon.sessions
    assert manager is not None
    fresh = manager._fresh
    real_create = fresh.create
    made: list[Path] = []

    async def slow_create(name: str, owner: tuple[int, int] | None, principal: str) -> Path:
        folder = await real_create(name, owner, principal)
        made.append(folder)
        await asyncio.sleep(0.5)  # as a workspace with a disk budget takes steps: the deadline
        return folder

    monkeypatch.setattr(fresh, "create", slow_create)
    before = _sessions_open(host_daemon)
    with pytest.raises(grpc.RpcError) as caught:
        host_daemon.stub.OpenSession(pb.OpenSessionRequest(), timeout=0.1)
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert _eventually(lambda: bool(made) and not made[0].exists()), made
    assert _eventually(lambda: _sessions_open(host_daemon) == before)


def test_a_session_whose_answer_would_come_after_the_deadline_is_closed_again(
    host_daemon: RunningDaemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _sessions_open(host_daemon)
    # Any deadline is now too close: as if the open took all of it.
    monkeypatch.setattr(service_module, "ANSWER_MARGIN_S", 3600.0)
    with pytest.raises(grpc.RpcError) as caught:
        host_daemon.stub.OpenSession(pb.OpenSessionRequest(), timeout=30)
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert "closed again; retry with a longer deadline" in (caught.value.details() or "")
    assert _eventually(lambda: _sessions_open(host_daemon) == before)
    # Without a deadline the answer can never be late.
    session = host_daemon.stub.OpenSession(pb.OpenSessionRequest())
    assert _sessions_open(host_daemon) == before + 1
    host_daemon.stub.CloseSession(
        pb.CloseSessionRequest(session_id=session.id, delete_workspace=True), timeout=30
    )
