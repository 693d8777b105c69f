"""Closing a session: calls still queued for it never run (not even against whatever directory
its released descriptor names by then), and a running call cancelled by the close still answers
its caller."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from daemon.calls.audit import AuditLog
from daemon.calls.scheduler import Scheduler
from daemon.errors import NotFound, Overloaded, RequestError, ToolError, Unavailable
from daemon.host.pinned import PinnedDirectory, WorkspaceMoved
from daemon.models import Caller
from daemon.sessions.disk import FreshWorkspaces, PlainWorkspaces
from daemon.sessions.kept_workspaces import KeptWorkspaces
from daemon.sessions.manager import _CLOSING, SessionManager
from daemon.sessions.session import Session
from daemon.sessions.store import SessionStore
from daemon.tools.contract import CallContext
from tests.unit.test_scheduler import FakeBash, audit, make_scheduler, req

__all__ = ["audit"]  # the fixture, used by name


def test_a_released_pin_is_never_used_again(tmp_path: Path) -> None:
    """Attack: the released descriptor number came back as another session's workspace and a
    queued Read of the closed session read that session's files."""
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    mine.mkdir()
    theirs.mkdir()
    (theirs / "secret.txt").write_text("theirs\n")
    pinned = PinnedDirectory.pin(mine)
    number = pinned.fd
    pinned.close()
    reused = os.open(theirs, os.O_PATH | os.O_DIRECTORY)
    try:
        assert pinned.fd == -1, "the number is forgotten"
        with pytest.raises(OSError):
            pinned.open_beneath("secret.txt", os.O_RDONLY)
        stale = PinnedDirectory(mine, number, *PinnedDirectory.pin(mine).identity, 0, 0, 0)
        if reused == number:  # the kernel handed the number to `theirs`
            with pytest.raises(WorkspaceMoved):
                stale.verify()
    finally:
        os.close(reused)


async def test_a_closed_session_refuses_to_be_worked_in(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    session = Session(id="s", workspace=tmp_path / "ws", owner="p")
    session.pinned_root()
    session.closed = True
    with pytest.raises(ToolError, match="closed"):
        await session.verify_workspace()


async def test_queued_calls_of_a_closed_session_never_run_and_running_ones_answer(
    tmp_path: Path, audit: AuditLog
) -> None:
    scheduler = make_scheduler(tmp_path, audit)
    store = scheduler._pipeline._sessions
    session = store.open(
        PinnedDirectory.pin((tmp_path / "ws").resolve()), None, owner=Caller().principal
    )
    running = asyncio.create_task(
        scheduler.execute(req("long", "Bash", session.id, seconds=30, safe=False), Caller())
    )
    await asyncio.sleep(0.2)  # it holds the session's lock exclusively
    queued = asyncio.create_task(
        scheduler.execute(req("queued", "Unsafe", session.id, seconds=0), Caller())
    )
    await asyncio.sleep(0.1)
    assert await scheduler.cancel_session(session.id) == 1
    store.close(session)
    long_answer = await asyncio.wait_for(running, 10)
    assert long_answer.result.is_error and "cancelled" in long_answer.result.content[0].text
    queued_answer = await asyncio.wait_for(queued, 10)
    assert queued_answer.result.is_error
    assert "closed before the call could run" in queued_answer.result.content[0].text


async def test_large_inputs_are_checked_off_the_event_loop(
    tmp_path: Path, audit: AuditLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attack: 16 Bash lines of 98 KB each held every other caller for seconds while they were
    analysed on the event loop."""
    import threading

    from daemon.tools.call import ToolCall

    scheduler = make_scheduler(tmp_path, audit)
    threads: list[str] = []
    real = ToolCall.prepare

    def spying(*args: object, **kwargs: object) -> ToolCall:
        threads.append(threading.current_thread().name)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ToolCall, "prepare", spying)
    pipeline = scheduler._pipeline
    await pipeline.prepare_off_loop(req("small", "Safe"), Caller())
    await pipeline.prepare_off_loop(req("large", "Safe", pad="x" * 10_000), Caller())
    assert threads[0] == threading.main_thread().name
    assert threads[1] != threading.main_thread().name


async def _no_objection(*_: object) -> str | None:
    return None


def _manager(scheduler: Scheduler, fresh: FreshWorkspaces, **options: Any) -> SessionManager:
    """A session manager over the scheduler's sessions, every policy question allowed."""
    return SessionManager(
        scheduler._pipeline._sessions,
        _no_objection,
        _no_objection,
        scheduler,
        fresh,
        default_idle_ttl_s=600,
        **options,
    )


@pytest.mark.parametrize("delete_workspace", [False, True])
async def test_a_close_answers_once_the_calls_it_cancelled_have_ended(
    tmp_path: Path, audit: AuditLog, monkeypatch: pytest.MonkeyPatch, delete_workspace: bool
) -> None:
    """Attacker round 98: CloseSession answered (and deleted the workspace, its budget lifted
    first) while a cancelled call's container was still being removed, and its command went on
    writing for up to a second after the answer."""
    ended: list[str] = []
    deleted_at: list[int] = []

    async def slow_to_end(self: FakeBash, args: object, ctx: CallContext) -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            await asyncio.sleep(0.3)  # as a container's removal takes its time
            ended.append(ctx.tool_use_id)
            raise
        return "done"

    class Fresh(PlainWorkspaces):
        async def delete(self, folder: Path, owner: str) -> bool:
            deleted_at.append(len(ended))
            return await super().delete(folder, owner)

    monkeypatch.setattr(FakeBash, "call", slow_to_end)
    scheduler = make_scheduler(tmp_path, audit)
    store = scheduler._pipeline._sessions
    fresh = Fresh(tmp_path / "fresh")
    manager = SessionManager(
        store, _no_objection, _no_objection, scheduler, fresh, default_idle_ttl_s=60
    )
    folder = await fresh.create("s1", None, Caller().principal)
    session = store.open(
        PinnedDirectory.pin(folder), None, owner=Caller().principal, owns_workspace=True
    )
    running = asyncio.create_task(
        scheduler.execute(req("long", "Bash", session.id, seconds=30), Caller())
    )
    await asyncio.sleep(0.2)
    closed = await manager.close(session.id, delete_workspace, Caller())
    assert closed.cancelled_calls == 1
    assert ended == ["long"], "the close answered before the call it cancelled had ended"
    if delete_workspace:
        assert deleted_at == [1] and closed.workspace_deleted
    answer = await asyncio.wait_for(running, 10)
    assert answer.result.is_error and "cancelled" in answer.result.content[0].text


async def test_sessions_opening_at_once_count_against_the_principals_cap(
    tmp_path: Path, audit: AuditLog
) -> None:
    """Attacker round 98: bob had 67 sessions open under a cap of 64, by opening them at once:
    each was checked before any of the others, still making its workspace, was counted."""

    class SlowFresh(PlainWorkspaces):
        async def create(self, name: str, owner: tuple[int, int] | None, principal: str) -> Path:
            await asyncio.sleep(0.2)
            return await super().create(name, owner, principal)

    (tmp_path / "ws").mkdir()
    store = SessionStore(tmp_path / "ws", max_per_principal=2, max_total=3)
    manager = SessionManager(
        store,
        _no_objection,
        _no_objection,
        make_scheduler(tmp_path, audit),
        SlowFresh(tmp_path / "fresh"),
        default_idle_ttl_s=60,
    )
    bob, alice = Caller(principal="bob"), Caller(principal="alice")
    opened = await asyncio.gather(
        *(manager.open("", 0, bob) for _ in range(5)), return_exceptions=True
    )
    assert sum(isinstance(o, Session) for o in opened) == 2
    refused = [o for o in opened if isinstance(o, Overloaded)]
    assert len(refused) == 3 and "bob" in str(refused[0])
    hers = await asyncio.gather(
        *(manager.open("", 0, alice) for _ in range(2)), return_exceptions=True
    )
    assert sum(isinstance(o, Session) for o in hers) == 1, "the daemon's total is 3"
    assert len([s for s in store._sessions.values() if not s.is_default]) == 3


async def test_a_fresh_workspace_closed_without_delete_is_kept_for_a_while_then_deleted(
    tmp_path: Path, audit: AuditLog
) -> None:
    fresh = PlainWorkspaces(tmp_path / "fresh")
    now = [1_000.0]
    kept = KeptWorkspaces(tmp_path / "kept.json", fresh, 60.0, lambda: now[0])
    scheduler = make_scheduler(tmp_path, audit)
    manager = _manager(scheduler, fresh, sweep_interval_s=0.01, kept=kept)
    keep = await manager.open("", 0, Caller())
    gone = await manager.open("", 0, Caller())
    await manager.close(keep.id, False, Caller())
    await manager.close(gone.id, True, Caller())
    assert kept.kept() == {keep.workspace: Caller().principal}
    assert not gone.workspace.exists()
    manager.start()
    try:
        await asyncio.sleep(0.05)
        assert keep.workspace.exists(), "deleted before its time"
        now[0] += 61
        async with asyncio.timeout(5):
            while keep.workspace.exists():
                await asyncio.sleep(0.01)
    finally:
        await manager.stop()
    assert kept.kept() == {}


async def test_kept_workspaces_and_open_sessions_together_stay_within_the_principals_limit(
    tmp_path: Path, audit: AuditLog
) -> None:
    """Attacker round 169: a principal kept a workspace per OpenSession and CloseSession, without
    limit. A fresh session is refused once the principal's kept workspaces and open sessions
    together reach the limit, so that every close, the idle sweeper's too, can still keep its
    workspace; another principal is not held by it, and deleting a kept one's session makes
    room."""
    fresh = PlainWorkspaces(tmp_path / "fresh")
    kept = KeptWorkspaces(tmp_path / "kept.json", fresh, 60.0, max_per_principal=3)
    manager = _manager(make_scheduler(tmp_path, audit), fresh, kept=kept)
    alice, bob = Caller(principal="alice"), Caller(principal="bob")
    for _ in range(2):
        session = await manager.open("", 0, alice)
        await manager.close(session.id, False, alice)
    last = await manager.open("", 0, alice)
    opened = await asyncio.gather(
        *(manager.open("", 0, alice) for _ in range(3)), return_exceptions=True
    )
    assert all(isinstance(o, Overloaded) for o in opened), opened
    assert "2 workspaces kept" in str(opened[0]) and "delete_workspace" in str(opened[0])
    assert isinstance(await manager.open("", 0, bob), Session)
    await manager.close(last.id, False, alice)
    assert len(kept.kept()) == 3 and all(folder.exists() for folder in kept.kept())
    with pytest.raises(Overloaded):
        await manager.open("", 0, alice)
    # An existing directory's session keeps nothing when it closes: it is not refused.
    (tmp_path / "existing").mkdir()
    assert isinstance(await manager.open(str(tmp_path / "existing"), 0, alice), Session)


async def test_a_fresh_workspace_is_registered_before_it_is_made_and_kept_if_not_deleted(
    tmp_path: Path, audit: AuditLog
) -> None:
    """Attacker round 170: the workspaces of sessions open when the daemon stopped were in no
    registry (never deleted, counted against nobody after the restart); a deletion that failed
    left its workspace the same way."""

    class Undeletable(PlainWorkspaces):
        async def delete(self, folder: Path, owner: str) -> bool:
            raise RequestError("btrfs subvolume delete timed out")

    fresh = Undeletable(tmp_path / "fresh")
    registry = tmp_path / "kept.json"
    manager = _manager(
        make_scheduler(tmp_path, audit), fresh, kept=KeptWorkspaces(registry, fresh, 60.0)
    )
    alice = Caller(principal="alice")
    left_open = await manager.open("", 0, alice)
    undeleted = await manager.open("", 0, alice)
    after_a_restart = KeptWorkspaces(registry, fresh, 60.0)
    assert after_a_restart.kept() == {left_open.workspace: "alice", undeleted.workspace: "alice"}
    assert after_a_restart.count("alice") == 2
    closed = await manager.close(undeleted.id, True, alice)
    assert not closed.workspace_deleted and undeleted.workspace.exists()
    assert KeptWorkspaces(registry, fresh, 60.0).count("alice") == 2


async def test_no_fresh_workspace_is_made_when_the_registry_cannot_be_written(
    tmp_path: Path, audit: AuditLog
) -> None:
    (tmp_path / "state").write_text("a file where the state directory should be\n")
    fresh = PlainWorkspaces(tmp_path / "fresh")
    kept = KeptWorkspaces(tmp_path / "state" / "kept.json", fresh, 60.0)
    manager = _manager(make_scheduler(tmp_path, audit), fresh, kept=kept)
    with pytest.raises(Unavailable, match="cannot record the workspace"):
        await manager.open("", 0, Caller(principal="alice"))
    assert not list((tmp_path / "fresh").glob("ws_*")), "a workspace was made"


async def test_a_close_that_hangs_holds_up_no_other_sessions_expiry(
    tmp_path: Path, audit: AuditLog
) -> None:
    """Attacker round 99's lead: the idle sweeper closed sessions one after the other, inline; a
    close waiting on a container the engine cannot kill (up to 300 s) held every other expiry."""
    stuck, released = asyncio.Event(), asyncio.Event()

    async def cleanup(session: Session) -> int:
        if session.id == hung.id:
            stuck.set()
            await released.wait()
        return 0

    scheduler = make_scheduler(tmp_path, audit)
    manager = _manager(
        scheduler,
        PlainWorkspaces(tmp_path / "fresh"),
        sandbox_cleanup=cleanup,
        sweep_interval_s=0.01,
    )
    hung = await manager.open("", 0, Caller())
    hung.idle_ttl_s = 0.0
    await asyncio.sleep(0.02)
    manager.start()
    try:
        await asyncio.wait_for(stuck.wait(), 5)
        other = await manager.open("", 0, Caller())
        other.idle_ttl_s = 0.0
        async with asyncio.timeout(5):
            while not other.closed:
                await asyncio.sleep(0.01)
    finally:
        released.set()
        await manager.stop()


async def test_a_session_is_closed_once_however_many_ask(tmp_path: Path, audit: AuditLog) -> None:
    """The idle sweeper closes in the background: a CloseSession arriving meanwhile must not
    close the session a second time (its containers removed twice, its workspace deleted while
    the first close keeps it)."""
    closing, released = asyncio.Event(), asyncio.Event()
    cleanups: list[str] = []

    async def cleanup(session: Session) -> int:
        cleanups.append(session.id)
        closing.set()
        await released.wait()
        return 0

    fresh = PlainWorkspaces(tmp_path / "fresh")
    kept = KeptWorkspaces(tmp_path / "kept.json", fresh, 0.0)
    scheduler = make_scheduler(tmp_path, audit)
    manager = _manager(scheduler, fresh, sandbox_cleanup=cleanup, sweep_interval_s=0.01, kept=kept)
    session = await manager.open("", 0, Caller())
    session.idle_ttl_s = 0.0
    await asyncio.sleep(0.02)
    manager.start()
    try:
        await asyncio.wait_for(closing.wait(), 5)
        with pytest.raises(NotFound):
            await asyncio.wait_for(manager.close(session.id, True, Caller()), 2)
    finally:
        released.set()
        await manager.stop()
    async with asyncio.timeout(5):
        while _CLOSING:
            await asyncio.sleep(0.01)
    assert cleanups == [session.id]
    assert session.workspace.exists() and kept.kept() == {session.workspace: Caller().principal}


async def test_two_closes_at_once_close_it_once_and_keep_the_registry_true(
    tmp_path: Path, audit: AuditLog
) -> None:
    """Attacker round 100: CloseSession with delete and without, sent at once, both ran: one
    deleted the workspace, the other recorded it as kept, and the registry held a folder that
    was gone (an error logged for it at every sweep, for ever)."""
    fresh = PlainWorkspaces(tmp_path / "fresh")
    kept = KeptWorkspaces(tmp_path / "kept.json", fresh, 0.0)
    scheduler = make_scheduler(tmp_path, audit)
    manager = _manager(scheduler, fresh, kept=kept)
    for first_deletes in (True, False):
        session = await manager.open("", 0, Caller())
        answers = await asyncio.gather(
            manager.close(session.id, first_deletes, Caller()),
            manager.close(session.id, not first_deletes, Caller()),
            return_exceptions=True,
        )
        closed = [a for a in answers if not isinstance(a, BaseException)]
        assert sum(a.workspace_deleted for a in closed) <= 1, answers
        recorded = session.workspace in kept.kept()
        assert recorded == session.workspace.exists(), (answers, recorded)


async def test_opening_a_session_through_a_link_never_says_where_it_leads(
    tmp_path: Path, audit: AuditLog
) -> None:
    """Attacker round 116: a session asked over `<default>/fdl/3`, fdl a link to /proc/self/fd,
    passed the policy (it judges the path as written) and the refusal named its real path, as
    the daemon (root) sees it: the daemon's open files, other tenants' workspaces among them."""
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "fdl").symlink_to("/proc/self/fd")
    manager = _manager(make_scheduler(tmp_path, audit), PlainWorkspaces(tmp_path / "fresh"))
    from daemon.errors import RequestError

    with pytest.raises(RequestError) as refused:
        await manager.open(str(tmp_path / "ws" / "fdl" / "3"), 0, Caller(principal="bob"))
    assert "real path" not in str(refused.value) and "/proc" not in str(refused.value)
