"""The result cache: bounded, expiring, never forgetting a running call."""

from __future__ import annotations

import asyncio

import pytest

from daemon.calls.idempotency import ResultCache
from daemon.errors import RequestError
from daemon.models import (
    Decision,
    ExecuteOutcome,
    ExecutionReport,
    Outcome,
    TextContent,
    ToolResult,
)


def outcome(tool_use_id: str, text: str = "ok", how: Outcome = Outcome.ALLOW) -> ExecuteOutcome:
    return ExecuteOutcome(
        result=ToolResult(tool_use_id=tool_use_id, content=(TextContent(text=text),)),
        decision=Decision(outcome=how),
        report=ExecutionReport(),
    )


async def test_finished_answers_are_bounded_oldest_first() -> None:
    cache = ResultCache(ttl_s=600, max_entries=3)
    for i in range(5):
        await cache.run_once(("p", "s", f"id{i}"), "h", lambda i=i: _answer(f"id{i}"))  # type: ignore[misc]
    assert len(cache) == 3
    await cache.run_once(("p", "s", "id5"), "h", lambda: _answer("id5"))
    ran: list[str] = []
    answer, replayed = await cache.run_once(("p", "s", "id0"), "h", lambda: _answer("id0", ran))
    # Its answer had to go, but the call ran: a retry is told so, never run a second time (a
    # destructive tool would act twice; the attacker round showed it with large answers).
    assert not ran and replayed and answer.result.is_error
    assert "already ran" in answer.result.content[0].text  # type: ignore[union-attr]
    with pytest.raises(RequestError):
        await cache.run_once(("p", "s", "id0"), "other", lambda: _answer("id0"))


async def test_an_answer_too_large_to_keep_still_marks_its_call_as_run() -> None:
    cache = ResultCache(ttl_s=600, max_chars_per_principal=1_000)
    await cache.run_once(("p", "s", "big"), "h", lambda: _answer("big", text="x" * 5_000))
    ran: list[str] = []
    answer, replayed = await cache.run_once(("p", "s", "big"), "h", lambda: _answer("big", ran))
    assert replayed and not ran and answer.result.is_error


async def test_expired_answers_are_forgotten() -> None:
    cache = ResultCache(ttl_s=0.01)
    await cache.run_once(("p", "s", "x"), "h", lambda: _answer("x"))
    await asyncio.sleep(0.05)
    ran: list[str] = []
    _, replayed = await cache.run_once(("p", "s", "x"), "h", lambda: _answer("x", ran))
    assert not replayed and ran == ["x"]


async def test_running_calls_are_never_evicted_and_duplicates_wait() -> None:
    cache = ResultCache(ttl_s=0, max_entries=0)
    gate = asyncio.Event()
    ran: list[str] = []

    async def slow() -> ExecuteOutcome:
        ran.append("slow")
        await gate.wait()
        return outcome("slow")

    first = asyncio.create_task(cache.run_once(("p", "s", "slow"), "h", slow))
    await asyncio.sleep(0)
    second = asyncio.create_task(cache.run_once(("p", "s", "slow"), "h", slow))
    await asyncio.sleep(0)
    gate.set()
    (a, replayed_a), (b, replayed_b) = await asyncio.gather(first, second)
    assert ran == ["slow"] and a == b and (replayed_a, replayed_b) == (False, True)


async def test_the_same_id_with_another_input_is_a_request_error() -> None:
    cache = ResultCache()
    await cache.run_once(("p", "s", "id"), "h1", lambda: _answer("id"))
    with pytest.raises(RequestError, match="different input"):
        await cache.run_once(("p", "s", "id"), "h2", lambda: _answer("id"))


async def test_refusals_are_not_remembered() -> None:
    cache = ResultCache()
    await cache.run_once(("p", "s", "ask"), "h", lambda: _answer("ask", how=Outcome.ASK))
    assert len(cache) == 0


async def _answer(
    tool_use_id: str, ran: list[str] | None = None, how: Outcome = Outcome.ALLOW, text: str = "ok"
) -> ExecuteOutcome:
    if ran is not None:
        ran.append(tool_use_id)
    return outcome(tool_use_id, text, how=how)


async def test_a_flood_by_one_principal_evicts_only_its_own_answers() -> None:
    cache = ResultCache(ttl_s=600, max_entries=100, max_entries_per_principal=50)
    await cache.run_once(("bob", "s", "pay-once"), "h", lambda: _answer("pay-once"))
    for i in range(500):
        await cache.run_once(("alice", "s", f"ls{i}"), "h", lambda i=i: _answer(f"ls{i}"))  # type: ignore[misc]
    ran: list[str] = []
    _, replayed = await cache.run_once(("bob", "s", "pay-once"), "h", lambda: _answer("x", ran))
    assert replayed and not ran, "bob's answer survived alice's flood"
    assert len(cache) <= 51


async def test_the_whole_bound_evicts_from_the_largest_holder() -> None:
    cache = ResultCache(ttl_s=600, max_entries=10, max_entries_per_principal=10)
    for i in range(3):
        await cache.run_once(("bob", "s", f"b{i}"), "h", lambda i=i: _answer(f"b{i}"))  # type: ignore[misc]
    for i in range(30):
        await cache.run_once(("alice", "s", f"a{i}"), "h", lambda i=i: _answer(f"a{i}"))  # type: ignore[misc]
    for i in range(3):
        _, replayed = await cache.run_once(("bob", "s", f"b{i}"), "h", lambda: _answer("x"))
        assert replayed


async def test_images_count_toward_the_size_bound() -> None:
    from daemon.models import ImageContent

    cache = ResultCache(ttl_s=600, max_chars=5_000_000, max_chars_per_principal=5_000_000)

    async def image(n: int) -> ExecuteOutcome:
        block = ImageContent(media_type="image/png", data=b"\x89PNG" + bytes(2_000_000))
        return ExecuteOutcome(
            result=ToolResult(tool_use_id=f"i{n}", content=(block,)),
            decision=Decision(outcome=Outcome.ALLOW),
            report=ExecutionReport(),
        )

    for n in range(10):
        await cache.run_once(("p", "s", f"i{n}"), "h", lambda n=n: image(n))  # type: ignore[misc]
    assert len(cache) <= 2, "ten 2 MB images do not fit in 5 MB"


async def test_another_principals_flood_cannot_push_out_that_a_call_ran() -> None:
    """17,000 cheap calls pushed a daemon-wide list of "already ran" out, and a retry ran the
    destructive call again (re-check round): each principal keeps its own."""
    cache = ResultCache(ttl_s=600, max_chars_per_principal=1_000, max_entries_per_principal=10)
    await cache.run_once(("bob", "s", "publish"), "h", lambda: _answer("p", text="x" * 5_000))
    for i in range(17_000):
        await cache.run_once(
            ("eve", "s", f"e{i}"), "h", lambda i=i: _answer(f"e{i}", text="y" * 900)
        )  # type: ignore[misc]
    ran: list[str] = []
    answer, replayed = await cache.run_once(("bob", "s", "publish"), "h", lambda: _answer("p", ran))
    assert replayed and not ran and answer.result.is_error
