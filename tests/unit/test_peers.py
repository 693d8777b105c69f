"""Peers: parallel siblings forming cohorts that run shared work once."""

from __future__ import annotations

import asyncio

import pytest

from daemon.tools.peers import Cohort, Peers


async def test_members_with_equal_keys_share_one_run_of_the_work() -> None:
    peers = Peers(range(3), wait_s=60)
    runs: list[tuple[str, ...]] = []

    async def work(items: tuple[str, ...]) -> list[str]:
        runs.append(items)
        await asyncio.sleep(0)
        return [item.upper() for item in items]

    async def member(index: int, key: str, item: str) -> tuple[int, str]:
        cohort, place = await peers.handle(index).join(key, item)
        result = await cohort.share(work)
        return len(cohort.items), result[place]

    answers = await asyncio.gather(
        member(0, "tree", "a"), member(1, "other", "b"), member(2, "tree", "c")
    )
    assert answers == [(2, "A"), (1, "B"), (2, "C")]
    assert sorted(runs) == [("a", "c"), ("b",)]


async def test_a_member_that_leaves_is_not_waited_for() -> None:
    peers = Peers(range(2), wait_s=60)  # a wait this long would time the test out
    joined = asyncio.ensure_future(peers.handle(0).join("k", "x"))
    await asyncio.sleep(0)
    assert not joined.done()
    peers.handle(1).leave()
    cohort, place = await joined
    assert (cohort.items, place) == (("x",), 0)


async def test_a_member_that_never_comes_is_waited_for_only_wait_s() -> None:
    peers = Peers(range(3), wait_s=0.05)
    first, second = await asyncio.gather(
        peers.handle(0).join("k", "x"), peers.handle(1).join("k", "y")
    )
    assert first[0] is second[0] and first[0].items == ("x", "y")
    late, place = await peers.handle(2).join("k", "z")
    assert (late.items, place) == (("z",), 0)


async def test_leaving_twice_or_joining_after_leaving_is_harmless() -> None:
    peers = Peers(range(2), wait_s=60)
    peers.handle(0).leave()
    peers.handle(0).leave()
    alone, _ = await peers.handle(0).join("k", "x")
    assert alone.items == ("x",)
    last, _ = await peers.handle(1).join("k", "y")
    assert last.items == ("y",)


async def test_a_cancelled_member_leaves_the_work_running_for_the_others() -> None:
    cohort = Cohort(["a", "b"])
    release = asyncio.Event()
    runs = 0

    async def work(items: tuple[str, ...]) -> str:
        nonlocal runs
        runs += 1
        await release.wait()
        return "done"

    first = asyncio.ensure_future(cohort.share(work))
    second = asyncio.ensure_future(cohort.share(work))
    await asyncio.sleep(0)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    release.set()
    assert await second == "done"
    assert runs == 1


async def test_the_work_stops_when_nobody_waits_for_it() -> None:
    cohort = Cohort(["a"])
    stopped = asyncio.Event()

    async def work(items: tuple[str, ...]) -> None:
        try:
            await asyncio.sleep(60)
        finally:
            stopped.set()

    waiting = asyncio.ensure_future(cohort.share(work))
    await asyncio.sleep(0)
    waiting.cancel()
    await asyncio.wait_for(stopped.wait(), timeout=30)


async def test_every_member_gets_the_work_s_error() -> None:
    cohort = Cohort(["a", "b"])

    async def work(items: tuple[str, ...]) -> None:
        raise ValueError("no")

    results = await asyncio.gather(cohort.share(work), cohort.share(work), return_exceptions=True)
    assert [type(r) for r in results] == [ValueError, ValueError]
