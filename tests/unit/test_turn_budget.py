"""The turn budget (daemon/calls/turn_budget.py): a turn's results together stay under the total,
the largest known results are shrunk first, the policy may lower the total, and single calls that
name a turn share one budget for its window."""

from __future__ import annotations

import asyncio
import random

import pytest

from daemon.calls.budget import MIN_BUDGET
from daemon.calls.turn_budget import PREVIEW_ROOM, TurnBudget, TurnRegistry, result_chars
from daemon.models import Decision, ExecuteOutcome, ExecutionReport, TextContent, ToolResult


def outcome(chars: int, name: str = "t", turn_budget: int | None = None) -> ExecuteOutcome:
    result = ToolResult(tool_use_id=name, content=(TextContent(text="x" * chars),))
    return ExecuteOutcome(
        result=result,
        decision=Decision(outcome=None),
        report=ExecutionReport(),
        turn_budget_chars=turn_budget,
    )


shrunk: list[str] = []


async def shrink(answer: ExecuteOutcome, room: int) -> ExecuteOutcome:
    shrunk.append(answer.result.tool_use_id)
    return outcome(room, answer.result.tool_use_id)


@pytest.fixture(autouse=True)
def _forget() -> None:
    shrunk.clear()


async def test_a_turn_within_its_budget_is_left_alone() -> None:
    turn = TurnBudget(200_000, 3)
    answers = [outcome(60_000, str(n)) for n in range(3)]
    out = [await turn.admit(a, shrink, answers[i + 1 :]) for i, a in enumerate(answers)]
    assert [result_chars(a) for a in out] == [60_000] * 3 and shrunk == []


async def test_the_largest_known_result_is_shrunk_first() -> None:
    turn = TurnBudget(200_000, 3)
    answers = [outcome(10_000, "small"), outcome(150_000, "large"), outcome(80_000, "middle")]
    out = [await turn.admit(a, shrink, answers[i + 1 :]) for i, a in enumerate(answers)]
    assert shrunk == ["large"]
    assert [result_chars(a) for a in out] == [10_000, PREVIEW_ROOM, 80_000]


async def test_results_not_known_yet_keep_their_room() -> None:
    turn = TurnBudget(200_000, 3)
    first = await turn.admit(outcome(150_000, "a"), shrink)
    second = await turn.admit(outcome(100_000, "b"), shrink)
    third = await turn.admit(outcome(40_000, "c"), shrink)
    assert shrunk == ["b"] and result_chars(first) == 150_000 and result_chars(third) == 40_000
    assert result_chars(second) == PREVIEW_ROOM and turn.used <= 200_000


@pytest.mark.parametrize("seed", range(20))
async def test_a_flood_never_passes_the_total(seed: int) -> None:
    rng = random.Random(seed)
    calls = rng.randint(1, 100)
    sizes = [rng.choice([0, 50, 3_000, 30_000, 50_000]) for _ in range(calls)]
    total = rng.choice([1_000, 50_000, 200_000])
    turn = TurnBudget(total, calls)
    answers = [outcome(size, str(n)) for n, size in enumerate(sizes)]
    known = rng.randint(0, calls)  # how many later results are known at each step
    out = [
        await turn.admit(a, shrink, answers[i + 1 : i + 1 + known]) for i, a in enumerate(answers)
    ]
    assert sum(result_chars(a) for a in out) <= max(total, MIN_BUDGET * calls)


async def test_the_policy_lowers_the_turns_total() -> None:
    turn = TurnBudget(200_000, 2)
    await turn.admit(outcome(30_000, "a", turn_budget=40_000), shrink)
    await turn.admit(outcome(30_000, "b"), shrink)
    assert shrunk == ["b"] and turn.used <= 40_000


def test_single_calls_naming_a_turn_share_it_for_its_window() -> None:
    turns = TurnRegistry(window_s=60, per_session=2)
    first = turns.get("s1", "turn-1", lambda: TurnBudget(10_000, 0))
    assert turns.get("s1", "turn-1", lambda: TurnBudget(10_000, 0)) is first
    assert turns.get("s2", "turn-1", lambda: TurnBudget(10_000, 0)) is not first
    expired = TurnRegistry(window_s=0)
    once = expired.get("s", "t", lambda: TurnBudget(10_000, 0))
    assert expired.get("s", "t", lambda: TurnBudget(10_000, 0)) is not once


def test_another_sessions_flood_of_turns_leaves_mine_alone() -> None:
    turns = TurnRegistry(window_s=60, per_session=4)
    mine = turns.get("victim", "t", lambda: TurnBudget(10_000, 0))
    for n in range(10_000):
        turns.get("mallory", f"t{n}", lambda: TurnBudget(10_000, 0))
    assert turns.get("victim", "t", lambda: TurnBudget(10_000, 0)) is mine
    first = turns.get("mallory", "t9999", lambda: TurnBudget(10_000, 0))
    assert turns.get("mallory", "t9999", lambda: TurnBudget(10_000, 0)) is first


async def test_concurrent_calls_of_one_turn_stay_within_it() -> None:
    turn = TurnBudget(60_000, 0)
    gate = asyncio.Event()

    async def slow_shrink(answer: ExecuteOutcome, room: int) -> ExecuteOutcome:
        await gate.wait()
        return await shrink(answer, room)

    answers = [outcome(40_000, str(n)) for n in range(16)]
    calls = [asyncio.create_task(turn.admit(answer, slow_shrink)) for answer in answers]
    await asyncio.sleep(0.01)
    gate.set()
    out = await asyncio.gather(*calls)
    # A turn of calls sent one by one has no known size: past its total, each still gets the
    # smallest answer there is.
    assert sum(result_chars(a) for a in out) <= 60_000 + MIN_BUDGET * len(answers)
