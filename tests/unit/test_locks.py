"""The session lock: shared holders overlap, exclusive holders are alone, arrival order is kept."""

from __future__ import annotations

import asyncio

from daemon.calls.locks import SharedExclusiveLock


async def _hold(lock: SharedExclusiveLock, exclusive: bool, log: list[str], name: str) -> None:
    async with lock.hold(exclusive=exclusive):
        log.append(f"+{name}")
        await asyncio.sleep(0.01)
        log.append(f"-{name}")


async def test_shared_holders_overlap() -> None:
    lock = SharedExclusiveLock()
    log: list[str] = []
    await asyncio.gather(*(_hold(lock, False, log, n) for n in "abc"))
    assert log[:3] == ["+a", "+b", "+c"]
    assert lock.idle


async def test_exclusive_holder_is_alone_and_order_is_kept() -> None:
    lock = SharedExclusiveLock()
    log: list[str] = []
    tasks = [
        asyncio.create_task(_hold(lock, False, log, "r1")),
        asyncio.create_task(_hold(lock, True, log, "w")),
        asyncio.create_task(_hold(lock, False, log, "r2")),
    ]
    await asyncio.gather(*tasks)
    assert log == ["+r1", "-r1", "+w", "-w", "+r2", "-r2"]


async def test_cancelled_waiter_does_not_block_or_leak() -> None:
    lock = SharedExclusiveLock()
    log: list[str] = []
    first = asyncio.create_task(_hold(lock, False, log, "r1"))
    await asyncio.sleep(0)
    writer = asyncio.create_task(_hold(lock, True, log, "w"))
    reader = asyncio.create_task(_hold(lock, False, log, "r2"))
    await asyncio.sleep(0)
    writer.cancel()
    await asyncio.gather(first, reader, return_exceptions=True)
    assert "+w" not in log
    assert "+r2" in log
    assert lock.idle


async def test_cancelled_holder_releases() -> None:
    lock = SharedExclusiveLock()

    async def hang() -> None:
        async with lock.hold(exclusive=True):
            await asyncio.sleep(100)

    task = asyncio.create_task(hang())
    await asyncio.sleep(0.01)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert lock.idle
    async with lock.hold(exclusive=True):
        pass
