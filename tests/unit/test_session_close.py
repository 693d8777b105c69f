"""Closing a session: calls still queued for it never run (not even against whatever directory
its released descriptor names by then), and a running call cancelled by the close still answers
its caller."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from daemon.calls.audit import AuditLog
from daemon.errors import ToolError
from daemon.host.pinned import PinnedDirectory, WorkspaceMoved
from daemon.models import Caller
from daemon.sessions.session import Session
from tests.unit.test_scheduler import audit, make_scheduler, req

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
    assert scheduler.cancel_session(session.id) == 1
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
