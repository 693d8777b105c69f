"""The stream of answers and progress a streaming RPC sends (daemon/server/service.py,
`_interleaved`): when the client goes away with answers still held back, the answers' source is
closed at once, so what it does at its end (a batch's records of the calls it never started)
is done then, not whenever the garbage collector gets to it (attacker round 160)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from daemon.models import Decision, ExecuteOutcome, ExecutionReport, TextContent, ToolResult
from daemon.server.progress_relay import ProgressRelay
from daemon.server.service import _interleaved


def _answer(tool_use_id: str) -> ExecuteOutcome:
    return ExecuteOutcome(
        result=ToolResult(tool_use_id=tool_use_id, content=(TextContent(text="ok"),)),
        decision=Decision(outcome=None),
        report=ExecutionReport(),
    )


async def test_a_stream_left_with_answers_held_back_closes_their_source_at_once() -> None:
    ended: list[str] = []

    async def answers() -> AsyncIterator[ExecuteOutcome]:
        try:
            for index in range(10):
                yield _answer(f"t{index}")
        finally:
            ended.append("closed")

    stream = _interleaved(answers(), ProgressRelay())
    first = await anext(stream)  # the client reads one answer, then stops reading
    assert first.response.result.tool_use_id == "t0"
    await asyncio.sleep(0.05)  # the next answers wait in the queue and at its door
    closing = asyncio.create_task(stream.aclose())  # the RPC ends: its stream is closed
    await asyncio.wait_for(closing, timeout=5)
    assert ended == ["closed"]
