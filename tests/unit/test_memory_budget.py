"""MemoryBudget: the sum of reservations never passes the budget or an owner's share; waiters
are served in order without one owner holding up the others."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from sandbox.memory import MemoryBudget, MemoryRefused, default_budget_mb, host_memory_mb


async def settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def test_reservations_within_the_budget_are_granted_at_once() -> None:
    budget = MemoryBudget(1000, owner_share=0.5)
    a = await budget.reserve("alice", 300)
    await budget.reserve("bob", 500)
    assert (budget.held(), budget.held("alice"), budget.held("bob")) == (800, 300, 500)
    budget.release(a)
    budget.release(a)  # a second release gives nothing back twice
    assert (budget.held(), budget.held("alice")) == (500, 0)


async def test_a_request_larger_than_a_share_is_refused_without_waiting() -> None:
    budget = MemoryBudget(1000, owner_share=0.5, wait_s=3600)
    with pytest.raises(MemoryRefused, match=r"asks for 600 MB.*\(500 MB\).*less memory"):
        await budget.reserve("alice", 600)
    assert (budget.held(), budget.refusals) == (0, 1)


async def test_a_request_over_the_total_waits_for_a_release() -> None:
    budget = MemoryBudget(1000, owner_share=0.6, wait_s=30)
    alice = await budget.reserve("alice", 600)
    await budget.reserve("bob", 400)
    waiting = asyncio.create_task(budget.reserve("carol", 500))
    await settle()
    assert not waiting.done()
    budget.release(alice)
    granted = await waiting
    assert (granted.owner, granted.mb, budget.held()) == ("carol", 500, 900)


async def test_a_waiter_gives_up_after_wait_s_with_what_holds_the_memory() -> None:
    budget = MemoryBudget(1000, owner_share=0.6, wait_s=0.05)
    await budget.reserve("alice", 600)
    await budget.reserve("bob", 400)
    with pytest.raises(MemoryRefused) as refused:
        await budget.reserve("bob", 100)
    message = str(refused.value)
    assert "1000 of the 1000 MB all sandboxes may hold" in message
    assert "400 of the 600 MB this principal's may hold" in message
    assert "Nothing ran" in message
    assert (budget.held(), budget.refusals) == (1000, 1)


async def test_one_owner_at_its_share_does_not_hold_up_another() -> None:
    budget = MemoryBudget(1000, owner_share=0.5, wait_s=30)
    await budget.reserve("alice", 500)
    alice_more = asyncio.create_task(budget.reserve("alice", 100))
    await settle()
    bob = await asyncio.wait_for(budget.reserve("bob", 400), 1)
    assert bob.mb == 400 and not alice_more.done()
    alice_more.cancel()
    with pytest.raises(asyncio.CancelledError):
        await alice_more
    assert budget.held("alice") == 500


async def test_a_large_waiter_is_not_starved_by_smaller_ones_behind_it() -> None:
    budget = MemoryBudget(1000, owner_share=1.0, wait_s=30)
    first = await budget.reserve("alice", 600)
    second = await budget.reserve("alice", 300)
    large = asyncio.create_task(budget.reserve("bob", 800))
    await settle()
    small = asyncio.create_task(budget.reserve("carol", 100))
    await settle()
    assert not small.done(), "a small request jumped the line over a waiting large one"
    budget.release(first)
    await settle()
    assert not large.done() and not small.done()
    budget.release(second)
    assert (await large).mb == 800
    assert (await small).mb == 100
    assert budget.held() == 900


async def test_a_cancelled_waiter_leaves_the_line_and_those_behind_it_move_up() -> None:
    budget = MemoryBudget(1000, owner_share=1.0, wait_s=30)
    await budget.reserve("alice", 900)
    large = asyncio.create_task(budget.reserve("bob", 500))
    await settle()
    small = asyncio.create_task(budget.reserve("carol", 100))
    await settle()
    assert not small.done()
    large.cancel()
    assert (await asyncio.wait_for(small, 1)).mb == 100
    assert budget.held() == 1000


async def test_closing_refuses_every_waiter() -> None:
    budget = MemoryBudget(100, owner_share=1.0, wait_s=30)
    await budget.reserve("alice", 100)
    waiting = asyncio.create_task(budget.reserve("bob", 50))
    await settle()
    budget.close()
    with pytest.raises(MemoryRefused, match="shutting down"):
        await waiting
    assert budget.held() == 100


async def test_no_interleaving_of_grants_and_gives_up_passes_the_budget() -> None:
    budget = MemoryBudget(1000, owner_share=0.5, wait_s=0.02)
    peak = 0

    async def call(owner: str, mb: int) -> None:
        nonlocal peak
        try:
            held = await budget.reserve(owner, mb)
        except MemoryRefused:
            return
        peak = max(peak, budget.held())
        assert budget.held(owner) <= budget.owner_mb
        await asyncio.sleep(0.001 * (mb % 7))
        budget.release(held)

    tasks = [call(f"p{i % 3}", 50 + (i * 37) % 300) for i in range(300)]
    await asyncio.gather(*tasks)
    assert peak <= 1000
    assert budget.held() == 0


def test_the_host_memory_is_read_from_meminfo(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemFree:  100 kB\nMemTotal:       24576000 kB\n", encoding="ascii")
    assert host_memory_mb(meminfo) == 24000
    assert default_budget_mb(24000) == 18000
    meminfo.write_text("MemTotal: lots\n", encoding="ascii")
    assert host_memory_mb(meminfo) == 0
    assert host_memory_mb(tmp_path / "missing") == 0


def test_a_budget_needs_sane_numbers() -> None:
    for total, share, wait in ((0, 0.5, 1.0), (100, 0.0, 1.0), (100, 1.5, 1.0), (100, 0.5, -1)):
        with pytest.raises(ValueError, match="memory budget"):
            MemoryBudget(total, owner_share=share, wait_s=wait)
