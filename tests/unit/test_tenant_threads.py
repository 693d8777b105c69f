"""Blocking filesystem work per tenant (daemon.host.threads.TenantThreads): a tenant whose
threads are all stuck waits for its own, never makes another wait, and cannot get more threads
by cancelling its calls."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from daemon.host.pinned import PinnedDirectory
from daemon.host.threads import TenantThreads

WAIT_S = 30.0  # only reached when something that should happen never does


def gated(started: list[str], name: str, gate: threading.Event) -> Callable[[], str]:
    def work() -> str:
        started.append(name)
        if not gate.wait(WAIT_S):
            raise TimeoutError(f"{name} was never let go")
        return name

    return work


async def until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(WAIT_S):
        while not condition():
            await asyncio.sleep(0.005)


async def test_a_tenant_with_every_thread_stuck_waits_alone() -> None:
    threads = TenantThreads(per_tenant=2)
    started: list[str] = []
    stuck = threading.Event()
    alice = [
        asyncio.create_task(threads.run("alice", gated(started, f"a{n}", stuck))) for n in range(3)
    ]
    await until(lambda: len(started) == 2)
    # Bob's work runs while alice's two threads are stuck and her third call waits for them.
    assert await threads.run("bob", lambda: "bob") == "bob"
    assert sorted(started) == ["a0", "a1"] and threads.held("alice") == 2
    assert threads.held("bob") == 0
    stuck.set()
    assert await asyncio.gather(*alice) == ["a0", "a1", "a2"]
    await until(lambda: threads.held("alice") == 0)


async def test_a_cancelled_call_keeps_its_slot_until_its_thread_returns() -> None:
    threads = TenantThreads(per_tenant=1)
    started: list[str] = []
    stuck = threading.Event()
    first = asyncio.create_task(threads.run("alice", gated(started, "first", stuck)))
    await until(lambda: started == ["first"])
    first.cancel()
    await asyncio.gather(first, return_exceptions=True)
    # The call is gone, its thread is not: alice cannot start another one meanwhile.
    assert threads.held("alice") == 1
    second = asyncio.create_task(threads.run("alice", gated(started, "second", stuck)))
    await asyncio.sleep(0.05)
    assert started == ["first"] and not second.done()
    stuck.set()
    assert await second == "second"
    await until(lambda: threads.held("alice") == 0)


async def test_a_cancelled_waiter_neither_takes_nor_loses_a_slot() -> None:
    threads = TenantThreads(per_tenant=1)
    started: list[str] = []
    gate = threading.Event()
    first = asyncio.create_task(threads.run("alice", gated(started, "first", gate)))
    await until(lambda: started == ["first"])
    waiting = asyncio.create_task(threads.run("alice", gated(started, "never", gate)))
    await asyncio.sleep(0.05)
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    gate.set()
    assert await first == "first"
    await until(lambda: threads.held("alice") == 0)
    assert await threads.run("alice", lambda: "next") == "next"
    assert "never" not in started


async def test_a_pin_that_ends_after_its_opener_gave_up_is_released(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OpenSession waits VERIFY_WAIT_S for a workspace to be pinned; the pin goes on in its
    thread, and what it pins when it ends must not be kept open by nobody."""
    from daemon.sessions import session

    monkeypatch.setattr(session, "VERIFY_WAIT_S", 0.05)
    gate = threading.Event()
    pinned: list[PinnedDirectory] = []

    def slow_pin() -> PinnedDirectory:
        gate.wait(WAIT_S)
        pinned.append(PinnedDirectory.pin(tmp_path.resolve()))
        return pinned[0]

    with pytest.raises(TimeoutError):
        await session.pin_off_loop(slow_pin, "alice")
    gate.set()
    await until(lambda: bool(pinned) and pinned[0].fd == -1)
