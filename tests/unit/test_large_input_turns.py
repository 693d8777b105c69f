"""LargeInputTurns: one large input at a time, and one principal's many do not hold up another's
for more than one of them."""

from __future__ import annotations

import asyncio

from daemon.policy.large_inputs import LargeInputTurns


async def test_one_at_a_time_and_another_principal_waits_for_one_of_each_other() -> None:
    turns = LargeInputTurns()
    order: list[str] = []
    inside = 0

    async def call(name: str, principal: str) -> None:
        nonlocal inside
        async with turns.turn(principal):
            inside += 1
            assert inside == 1, "two large inputs at once"
            order.append(name)
            await asyncio.sleep(0.01)
            inside -= 1

    alice = [asyncio.create_task(call(f"alice{n}", "alice")) for n in range(5)]
    await asyncio.sleep(0)  # alice's five are all in line before bob's
    bob = asyncio.create_task(call("bob", "bob"))
    await asyncio.gather(*alice, bob)
    assert order.index("bob") <= 1, order
    assert turns.waiting("alice") == turns.waiting("bob") == 0


async def test_a_cancelled_wait_leaves_the_line() -> None:
    turns = LargeInputTurns()
    release = asyncio.Event()

    async def hold() -> None:
        async with turns.turn("alice"):
            await release.wait()

    holder = asyncio.create_task(hold())
    await asyncio.sleep(0)
    waiting = asyncio.create_task(hold())
    await asyncio.sleep(0)
    assert turns.waiting("alice") == 2
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    assert turns.waiting("alice") == 1
    release.set()
    await holder
    assert turns.waiting("alice") == 0
    async with turns.turn("alice"):  # the line works after all that
        pass
