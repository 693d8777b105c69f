"""What an ExecuteStream call leaves behind is let go once its answer exists, however slowly
the client reads it, and a stream the client cancels is closed without an error."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, cast

import pytest

from daemon.calls.idempotency import cancelled_outcome
from daemon.calls.pipeline import CallRequest
from daemon.models import Caller, ExecuteOutcome, ToolUse
from daemon.server.held_requests import HeldRequests
from daemon.server.service import ExecutorService, Intake
from sandbox import after_answer


class _Scheduler:
    """Answers every call at once, leaving work behind as a sandboxed call leaves its container."""

    def __init__(self, left: list[str]) -> None:
        self._left = left

    async def execute(self, call: CallRequest, caller: Caller) -> ExecuteOutcome:
        after_answer.later(lambda: self._left.append(call.tool_use.id))
        return cancelled_outcome(call.tool_use.id)


class _Resolver:
    def resolve(self, context: object) -> Caller:
        return Caller()


class _Request:
    size = 0
    converted_size = 0

    def __init__(self, call: CallRequest) -> None:
        self._call = call

    async def get(self) -> CallRequest:
        return self._call


class _Context:
    """A grpc context whose RPC never ends while the test runs (a client that stops reading)."""

    def __init__(self) -> None:
        self.done_callbacks: list[Callable[[object], None]] = []

    def add_done_callback(self, callback: Callable[[object], None]) -> None:
        self.done_callbacks.append(callback)

    def time_remaining(self) -> float | None:
        return None


def _service(left: list[str]) -> ExecutorService:
    return ExecutorService(
        pipeline=cast(Any, None),
        scheduler=cast(Any, _Scheduler(left)),
        sessions=cast(Any, None),
        resolver=cast(Any, _Resolver()),
        intake=Intake(),
        held_requests=HeldRequests(1 << 20, 0),
    )


async def test_a_stream_whose_client_stops_reading_lets_its_work_go_after_the_answer(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Attacker round 98: a client that read nothing of an ExecuteStream held back the call's
    repository look (and its container's removal) until it cancelled, 10 s later: the 1 s
    fallback only started once the stream's last event had been taken. And the stream closed
    by grpc from another context logged a ValueError every time."""
    monkeypatch.setattr(after_answer, "RELEASE_AFTER_S", 0.01)
    left: list[str] = []
    context = _Context()
    request = CallRequest(tool_use=ToolUse(id="toolu_slow_reader", name="Bash", input={}))
    stream = _service(left).ExecuteStream(cast(Any, _Request(request)), cast(Any, context))
    # Taken in a task of its own, as grpc does; the client then stops reading.
    event = await asyncio.create_task(anext(aiter(stream)))  # type: ignore[arg-type]
    assert event.WhichOneof("kind") == "response"
    async with asyncio.timeout(5):
        while not left:
            await asyncio.sleep(0.005)
    assert left == ["toolu_slow_reader"]
    with caplog.at_level(logging.ERROR):
        await stream.aclose()  # the client cancelled: grpc closes the stream from elsewhere
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
