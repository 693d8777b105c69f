"""What a call leaves behind waits for its answer: held work, its release, and no holder."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from sandbox import after_answer


async def test_without_a_holder_work_runs_at_once() -> None:
    ran: list[str] = []
    after_answer.later(lambda: ran.append("now"))
    assert ran == ["now"]


async def test_held_work_waits_for_the_release_and_runs_once_in_order() -> None:
    ran: list[int] = []
    with after_answer.holding() as held:
        after_answer.later(lambda: ran.append(1))
        after_answer.later(lambda: ran.append(2))
        assert ran == []
    assert ran == []  # leaving the block is not the answer being sent
    held.release()
    held.release()
    assert ran == [1, 2]


async def test_work_handed_over_after_the_release_runs_at_once() -> None:
    ran: list[str] = []
    with after_answer.holding() as held:
        held.release()
        after_answer.later(lambda: ran.append("late"))
    assert ran == ["late"]


async def test_tasks_started_by_the_call_are_held_too_and_others_are_not() -> None:
    ran: list[str] = []

    async def call_work() -> None:
        after_answer.later(lambda: ran.append("call"))

    with after_answer.holding() as held:
        await asyncio.create_task(call_work())
    await asyncio.create_task(call_work())  # started outside: nothing holds it
    assert ran == ["call"]
    held.release()
    assert ran == ["call", "call"]


async def test_a_release_from_another_thread_runs_the_work_on_the_loop() -> None:
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    where: list[int] = []

    def job() -> None:
        where.append(threading.get_ident())
        assert asyncio.get_running_loop() is loop
        done.set()

    with after_answer.holding() as held:
        after_answer.later(job)
    thread = threading.Thread(target=held.release)
    thread.start()
    thread.join()
    await asyncio.wait_for(done.wait(), 5)
    assert where == [threading.get_ident()]


async def test_a_holder_never_released_lets_its_work_go_a_while_after_the_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(after_answer, "RELEASE_AFTER_S", 0.01)
    ran: list[str] = []
    with after_answer.holding():
        after_answer.later(lambda: ran.append("anyway"))
        await asyncio.sleep(0.05)  # a call longer than the fallback: still held while it runs
        assert ran == []
    async with asyncio.timeout(5):
        while not ran:
            await asyncio.sleep(0.005)
    assert ran == ["anyway"]


async def test_failing_work_is_logged_and_the_rest_still_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ran: list[str] = []

    def broken() -> None:
        raise RuntimeError("boom")

    with after_answer.holding() as held:
        after_answer.later(broken)
        after_answer.later(lambda: ran.append("next"))
    with caplog.at_level(logging.ERROR):
        held.release()
        assert ran == ["next"]
        after_answer.later(broken)  # no holder: logged as well, never the caller's
    failures = [r for r in caplog.records if r.getMessage() == "work left behind by a call failed"]
    assert len(failures) == 2
