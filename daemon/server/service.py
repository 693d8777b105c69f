"""The Executor servicer: thin handlers that identify the caller, convert, hand over to the
scheduler, convert back. Errors they raise become statuses in one place (daemon.server.decoding,
with the mapping in daemon.server.status)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, TypeVar, cast

import grpc

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon.calls.pipeline import CallRequest, Pipeline, PreparedCall, answered_call
from daemon.calls.scheduler import Scheduler
from daemon.calls.streaming_turn import StreamingTurn
from daemon.errors import (
    DeadlineExceeded,
    Overloaded,
    RequestError,
    TooljailError,
    Unavailable,
)
from daemon.models import Caller, ExecuteOutcome
from daemon.ops.metrics import CancelReason, Metrics
from daemon.server import convert
from daemon.server.decoding import Converter, Decoded, Weighed
from daemon.server.held_requests import HeldRequests, Take
from daemon.server.identity import CallerResolver
from daemon.server.progress_relay import ProgressRelay
from daemon.sessions.manager import SessionManager
from sandbox import after_answer

Context = grpc.aio.ServicerContext[object, object]
T = TypeVar("T")

ANSWER_MARGIN_S = 0.01
"""An answer sent with less of its request's deadline left may arrive after the caller stopped
waiting (loopback, a loaded machine); where that would leave something behind, it is undone."""


@contextlib.contextmanager
def _after_the_answer(context: Context) -> Iterator[after_answer.Held]:
    """Within: what the call leaves behind (its container to remove, the warm pool to refill)
    waits until the RPC has ended, its answer sent (sandbox/after_answer.py). Only for one call
    per RPC: a batch's later calls want the pool refilled while it goes on."""
    with after_answer.holding() as held:

        def release(_: Context) -> None:
            held.release()

        # The stub types the callback as a class of its own, not as a protocol a function meets.
        context.add_done_callback(cast(Any, release))
        yield held


class Intake:
    """Whether new calls are taken (off while the daemon drains for shutdown)."""

    def __init__(self) -> None:
        self.open = True

    def require_open(self) -> None:
        """Refuse new work while shutting down."""
        if not self.open:
            raise Unavailable("tooljail is shutting down; retry against a running daemon")


def _weighed(converter: Callable[[Any], object]) -> Converter:
    """`converter`, its result weighed (HeldRequests counts what a conversion holds)."""

    def converted(message: Any) -> Weighed:
        value = converter(message)
        return Weighed(value, convert.held_size(value))

    return converted


REQUEST_CONVERTERS: dict[str, Converter] = {
    "Execute": _weighed(convert.call_request_from_proto),
    "ExecuteStream": _weighed(convert.call_request_from_proto),
    "ExecuteBatch": _weighed(convert.batch_from_proto),
    "ExecuteBatchStream": _weighed(convert.batch_from_proto),
    "ExecuteTurn": _weighed(convert.turn_part_from_proto),
}
"""The Executor methods whose requests ExecutorService is handed converted (decoding.Decoded)."""


async def _held(request: Decoded[T], take: Take) -> T:
    """The request converted, held for its principal: its bytes as received first, then what
    its conversion holds (attacker round 163) and a copy of about its bytes more, which the
    pipeline keeps while the call waits and runs (the policy document's body; round 164)."""
    take(request.size)
    value = await request.get()
    take(request.converted_size + request.size)
    return value


class ExecutorService:
    """tooljail.v1.Executor (registered with REQUEST_CONVERTERS)."""

    def __init__(
        self,
        pipeline: Pipeline,
        scheduler: Scheduler,
        sessions: SessionManager,
        resolver: CallerResolver,
        intake: Intake,
        held_requests: HeldRequests,
        metrics: Metrics | None = None,
    ) -> None:
        self._metrics = metrics
        self._held = held_requests
        self._pipeline = pipeline
        self._scheduler = scheduler
        self._sessions = sessions
        self._resolver = resolver
        self._intake = intake
        self._turns = TurnStreams()

    def _admit(self, context: Context) -> Caller:
        self._intake.require_open()
        return self._resolver.resolve(context)

    async def ListTools(
        self, request: pb.ListToolsRequest, context: Context
    ) -> pb.ListToolsResponse:
        definitions = await self._pipeline.list_tools(
            request.session_id, self._admit(context), include_deferred=request.include_deferred
        )
        return convert.tools_to_proto(definitions)

    async def Execute(self, request: Decoded[CallRequest], context: Context) -> pb.ExecuteResponse:
        caller = self._admit(context)
        call = await _held(request, self._hold(caller, context))
        with _after_the_answer(context), self._counting_cancel(call.tool_use.name, context):
            outcome = await self._scheduler.execute(call, caller)
        return convert.outcome_to_proto(outcome)

    def _hold(self, caller: Caller, context: Context) -> Take:
        """What the RPC holds, counted for its caller until it has ended: its last message
        sent, or the call cancelled (attacker round 163: a stream ended for not being read,
        whose status the client never took either, had let its share go and stayed open)."""
        holding = self._held.hold(caller.principal)

        def release(_: Context) -> None:
            holding.release()

        context.add_done_callback(cast(Any, release))
        return holding.take

    @contextlib.contextmanager
    def _counting_cancel(self, tool: str, context: Context) -> Iterator[None]:
        """Count a call cut short by the client or its deadline (then let the cancel go on)."""
        try:
            yield
        except (asyncio.CancelledError, GeneratorExit):
            # GeneratorExit: a stream the client cancelled while it waited to be read.
            if self._metrics is not None:
                remaining = context.time_remaining()
                expired = remaining is not None and remaining <= 0
                reason = CancelReason.DEADLINE if expired else CancelReason.CLIENT
                self._metrics.call_cancelled(tool, reason)
            raise

    async def ExecuteBatch(
        self, request: Decoded[list[CallRequest]], context: Context
    ) -> AsyncIterator[pb.ExecuteResponse]:
        caller = self._admit(context)
        calls = await _held(request, self._hold(caller, context))
        async for outcome in self._scheduler.execute_batch(calls, caller):
            yield convert.outcome_to_proto(outcome)

    async def ExecuteStream(
        self, request: Decoded[CallRequest], context: Context
    ) -> AsyncIterator[pb.ExecuteEvent]:
        caller = self._admit(context)
        relay = ProgressRelay()
        call = await _held(request, self._hold(caller, context))
        call = dataclasses.replace(call, progress=relay.sink(call.tool_use.id))

        async def answers(held: after_answer.Held) -> AsyncGenerator[ExecuteOutcome, None]:
            outcome = await self._scheduler.execute(call, caller)
            # The answer exists: what the call left waits at most a little longer, however
            # slowly the client takes the stream's last events (attacker round 98: a client
            # that read nothing held back the call's repository look until it cancelled).
            held.answered()
            yield outcome

        with (
            _after_the_answer(context) as held,
            self._counting_cancel(call.tool_use.name, context),
        ):
            async for event in _interleaved(answers(held), relay):
                yield event

    async def ExecuteBatchStream(
        self, request: Decoded[list[CallRequest]], context: Context
    ) -> AsyncIterator[pb.ExecuteEvent]:
        """ExecuteBatch with each call's progress interleaved with the answers (which still come
        in request order)."""
        caller = self._admit(context)
        relay = ProgressRelay(max_items=256)
        take = self._hold(caller, context)
        with self._turns.slot(caller.principal):
            calls = [
                dataclasses.replace(call, progress=relay.sink(call.tool_use.id))
                for call in await _held(request, take)
            ]
            async for event in _interleaved(self._scheduler.execute_batch(calls, caller), relay):
                yield event

    async def ExecuteTurn(
        self, messages: AsyncIterator[Decoded[convert.TurnPart]], context: Context
    ) -> AsyncIterator[pb.ExecuteEvent]:
        """One assistant turn while the model streams it: each tool_use starts as soon as the
        scheduling rules allow; progress and answers come back as ExecuteBatchStream's do."""
        caller = self._admit(context)
        relay = ProgressRelay(max_items=256)
        turn = self._scheduler.streaming_turn(caller)

        async def prepare(request: CallRequest) -> PreparedCall:
            return await self._pipeline.prepare_off_loop(request, caller)

        answered: list[ExecuteOutcome] = []

        async def answers() -> AsyncGenerator[ExecuteOutcome, None]:
            async for outcome in turn.answers():
                answered.append(outcome)
                yield outcome

        take = self._hold(caller, context)
        with self._turns.slot(caller.principal):
            feeder = asyncio.create_task(_feed(messages, turn, relay, prepare, take))
            try:
                async for event in _interleaved(answers(), relay):
                    yield event
                if answered:
                    calls = turn.calls
                    notes = await self._pipeline.batch_hooks.after(
                        calls[0].session, caller, [answered_call(c) for c in calls], answered
                    )
                    if notes:
                        yield convert.batch_end_to_proto(notes)
            finally:
                turn.cancel()
                feeder.cancel()
                await asyncio.gather(feeder, return_exceptions=True)

    async def OpenSession(self, request: pb.OpenSessionRequest, context: Context) -> pb.Session:
        session = await self._sessions.open(
            request.workspace, request.idle_ttl_s, self._admit(context), request.mode
        )
        remaining = context.time_remaining()
        if remaining is not None and remaining < ANSWER_MARGIN_S:
            # The answer would arrive after the caller stopped waiting: the session would be
            # open with nobody knowing its id.
            self._sessions.discard(session)
            raise DeadlineExceeded(
                "the session was opened too close to the request's deadline for the answer to "
                "reach you, so it was closed again; retry with a longer deadline"
            )
        return convert.session_to_proto(session)

    async def CloseSession(
        self, request: pb.CloseSessionRequest, context: Context
    ) -> pb.CloseSessionResponse:
        caller = self._resolver.resolve(context)
        closed = await self._sessions.close(
            request.session_id, request.delete_workspace, caller, admin=caller.admin
        )
        return convert.closed_to_proto(closed)


class TurnStreams:
    """Open ExecuteTurn and ExecuteBatchStream streams, per principal and in all: each holds the
    answers of calls the client has not read yet, so one caller may not open them without end."""

    def __init__(self, per_principal: int = 8, total: int = 256) -> None:
        self._per_principal = per_principal
        self._total = total
        self._open: dict[str, int] = {}

    @contextlib.contextmanager
    def slot(self, principal: str) -> Iterator[None]:
        mine = self._open.get(principal, 0)
        if mine >= self._per_principal or sum(self._open.values()) >= self._total:
            raise Overloaded(
                f"too many turn streams are open ({mine} of yours, at most "
                f"{self._per_principal}; {self._total} in all); end one and retry"
            )
        self._open[principal] = mine + 1
        try:
            yield
        finally:
            self._open[principal] -= 1
            if not self._open[principal]:
                del self._open[principal]


async def _feed(
    messages: AsyncIterator[Decoded[convert.TurnPart]],
    turn: StreamingTurn,
    relay: ProgressRelay,
    prepare: Callable[[CallRequest], Awaitable[PreparedCall]],
    take: Take,
) -> None:
    """Hands the blocks of a streamed turn to it as they arrive, each message's bytes held by
    the turn until it ends (`take`); a bad message ends the turn with a RequestError, one past
    the caller's share with Overloaded (the blocks before either are still answered)."""
    session_id = ""
    seen: set[str] = set()
    try:
        async for message in messages:
            part = await _held(message, take)
            if isinstance(part, convert.TurnEnd):
                break
            if isinstance(part, convert.TurnStart):
                if seen:
                    raise RequestError("TurnMessage.start must come before any tool_use")
                session_id = part.session_id
                continue
            tool_use = part
            if len(seen) >= convert.MAX_BATCH_CALLS:
                raise RequestError(
                    f"a turn holds at most {convert.MAX_BATCH_CALLS} tool_use blocks"
                )
            if tool_use.id in seen:
                raise RequestError(f"tool_use id {tool_use.id!r} was already sent in this turn")
            seen.add(tool_use.id)
            request = CallRequest(
                tool_use=tool_use, session_id=session_id, progress=relay.sink(tool_use.id)
            )
            turn.add(await prepare(request))
    except TooljailError as exc:
        turn.end(exc)
        return
    turn.end()


async def _interleaved(
    answers: AsyncGenerator[ExecuteOutcome, None], relay: ProgressRelay
) -> AsyncIterator[pb.ExecuteEvent]:
    """The answers as stream events, with the progress waiting in `relay` sent as it comes (and
    all of it before the answer that ends a call's part)."""
    # One answer at a time: a client that does not read holds the calls' answers back where
    # they are (bounded by the turn), not in a queue that grows.
    queue: asyncio.Queue[ExecuteOutcome | None] = asyncio.Queue(maxsize=1)

    async def produce() -> None:
        try:
            async for outcome in answers:
                await queue.put(outcome)
        except asyncio.CancelledError:
            # The stream ended: nobody reads the queue any more, so no end mark is put in it
            # (attacker round 160: waiting for room there held this task, and the answers'
            # own end, a batch's records of the calls it never started, until collected).
            raise
        except BaseException:
            await queue.put(None)  # the failure, which `await producer` then raises
            raise
        else:
            await queue.put(None)
        finally:
            # Closed here and now, whichever way it ended: its own end runs in this task.
            await answers.aclose()

    producer = asyncio.create_task(produce())
    try:
        while True:
            getting = asyncio.ensure_future(queue.get())
            waiting = asyncio.ensure_future(relay.wait())
            try:
                await asyncio.wait({getting, waiting}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiting.cancel()
                if not getting.done():
                    getting.cancel()
            for tool_use_id, update in relay.take():
                yield convert.progress_to_proto(tool_use_id, update, relay.dropped)
            if getting.done() and not getting.cancelled():
                outcome = getting.result()
                if outcome is None:
                    break
                yield convert.event_to_proto(outcome)
        await producer  # its failure, if any, is the RPC's
    finally:
        if not producer.done():
            producer.cancel()
            await asyncio.gather(producer, return_exceptions=True)
