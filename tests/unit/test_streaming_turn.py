"""A turn whose calls arrive one by one (daemon/calls/streaming_turn.py), over fake calls: groups
form as they would in a batch, a call starts as soon as the rules allow, answers come in arrival
order, a failed Bash cancels its group (a late joiner never runs, and is answered so), and a
broken stream of blocks ends the answers with its error after the calls before it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest

from daemon.calls.streaming_turn import StreamingTurn
from daemon.calls.turn_budget import TurnBudget
from daemon.errors import RequestError
from daemon.models import Decision, ExecuteOutcome, ExecutionReport, TextContent, ToolResult


@dataclass
class FakeCall:
    name: str
    concurrency_safe: bool = True
    cancels_siblings: bool = True
    fails: bool = False
    gate: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def request(self) -> Any:
        return type("R", (), {"tool_use": type("U", (), {"id": self.name})})()


def answer(name: str, text: str, is_error: bool = False) -> ExecuteOutcome:
    return ExecuteOutcome(
        result=ToolResult(tool_use_id=name, content=(TextContent(text=text),), is_error=is_error),
        decision=Decision(outcome=None),
        report=ExecutionReport(),
    )


class Harness:
    def __init__(self) -> None:
        self.started: list[str] = []

        async def run_one(call: Any) -> ExecuteOutcome:
            self.started.append(call.name)
            await call.gate.wait()
            return answer(call.name, "failed" if call.fails else "ok", call.fails)

        async def shrink(outcome: ExecuteOutcome, room: int) -> ExecuteOutcome:
            return outcome

        self.turn = StreamingTurn(
            run_one,
            lambda call: shrink,
            lambda call, failed: answer(call.name, f"cancelled by {failed.name}", True),
            lambda call, failed: answer(call.name, f"not run after {failed.name}", True),
            max_parallel=10,
            turn=TurnBudget(200_000, 0),
        )

    async def collect(self) -> list[ExecuteOutcome]:
        return [outcome async for outcome in self.turn.answers()]


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_safe_calls_join_the_running_group_and_others_wait() -> None:
    h = Harness()
    answers = asyncio.create_task(h.collect())
    a, b, c = FakeCall("a"), FakeCall("b"), FakeCall("c", concurrency_safe=False)
    h.turn.add(a)  # type: ignore[arg-type]
    await settle()
    h.turn.add(b)  # type: ignore[arg-type]
    h.turn.add(c)  # type: ignore[arg-type]
    await settle()
    assert h.started == ["a", "b"], "b did not start beside a, or c did not wait"
    b.gate.set()
    await settle()
    assert h.started == ["a", "b"]
    a.gate.set()
    await settle()
    assert h.started == ["a", "b", "c"]
    c.gate.set()
    h.turn.end()
    assert [o.result.tool_use_id for o in await answers] == ["a", "b", "c"]


async def test_a_failed_bash_cancels_its_group_and_a_late_joiner_never_runs() -> None:
    h = Harness()
    answers = asyncio.create_task(h.collect())
    slow, bad = FakeCall("slow"), FakeCall("bad", fails=True)
    h.turn.add(slow)  # type: ignore[arg-type]
    h.turn.add(bad)  # type: ignore[arg-type]
    bad.gate.set()
    await settle()
    late = FakeCall("late")
    h.turn.add(late)  # type: ignore[arg-type]
    h.turn.end()
    out = await answers
    assert [o.result.text() for o in out] == ["cancelled by bad", "failed", "not run after bad"]
    assert "late" not in h.started


async def test_a_broken_stream_ends_the_answers_with_its_error_after_the_others() -> None:
    h = Harness()
    done = FakeCall("done")
    done.gate.set()
    h.turn.add(done)  # type: ignore[arg-type]
    h.turn.end(RequestError("bad message"))
    seen: list[str] = []
    with pytest.raises(RequestError, match="bad message"):
        async for outcome in h.turn.answers():
            seen.append(outcome.result.tool_use_id)
    assert seen == ["done"]


async def test_a_call_after_a_failed_group_still_runs_once_the_group_is_done() -> None:
    h = Harness()
    answers = asyncio.create_task(h.collect())
    bad = FakeCall("bad", fails=True)
    bad.gate.set()
    h.turn.add(bad)  # type: ignore[arg-type]
    await settle()
    late = FakeCall("late")  # joins the failed group: never runs
    h.turn.add(late)  # type: ignore[arg-type]
    writer = FakeCall("writer", concurrency_safe=False)
    writer.gate.set()
    h.turn.add(writer)  # type: ignore[arg-type]
    h.turn.end()
    out = await asyncio.wait_for(answers, 5)
    assert [o.result.tool_use_id for o in out] == ["bad", "late", "writer"]
    assert h.started == ["bad", "writer"]
