"""How many request messages each principal may have on their way in at once.

While grpc waits for a request message, its core takes in every byte the client sends of it, up
to max_request_bytes, and nothing of tooljail's counts them before the message is whole: a
caller with a token announcing 16 MiB messages on many streams and leaving each one byte short
held gigabytes, without end (attacker round 165). So a call's request is read only in one of its
principal's receipt turns (as many as max_held_request_bytes holds largest requests), the other
calls waiting for one before anything of theirs is read; and a request must arrive whole within
the receive timeout, or the call is ended (which lets its bytes go).

This runs as a server interceptor, on every listener: a unary method's handler becomes one that
takes its request as a stream, so that tooljail decides when the one message is read. A client
streaming method holds a turn for as long as it is open, but ExecuteTurn, whose open streams are
bounded per principal by the service itself (each has one message on its way in at a time).
The methods whose requests are not counted against their principal's share (all but the
Execute family) take requests of at most SMALL_MESSAGE_BYTES, refused before they are decoded.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from typing import Any, TypeAlias

import grpc

from daemon.errors import Overloaded, RequestError, TooljailError
from daemon.host.turns import PrincipalTurns
from daemon.server.identity import CallerResolver
from daemon.server.status import Refusal

Context = grpc.aio.ServicerContext[Any, Any]
Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"
Continuation: TypeAlias = "Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]]"


class Receipts:
    """Each principal's receipt turns."""

    def __init__(self, per_principal: int, timeout_s: float) -> None:
        self._per_principal = per_principal
        self.timeout_s = timeout_s
        # No bound across principals: each one's turns bound what it makes grpc hold.
        self._turns = PrincipalTurns(sys.maxsize, per_principal=per_principal)

    @contextlib.asynccontextmanager
    async def turn(self, principal: str) -> AsyncIterator[None]:
        """One of `principal`'s receipt turns, waited for at most the timeout (Overloaded)."""
        async with contextlib.AsyncExitStack() as held:
            try:
                async with asyncio.timeout(self.timeout_s):
                    await held.enter_async_context(self._turns.turn(principal))
            except TimeoutError:
                raise Overloaded(
                    f"{self._per_principal} of your requests have been on their way in for "
                    f"{self.timeout_s:g} s and this one waited for them; send each request "
                    "whole, and fewer at once"
                ) from None
            yield

    async def received(self, context: Context) -> object:
        """The one message of a unary call, within the timeout. Read from the context, not
        through grpc's request iterator, which would keep it as long as the call."""
        try:
            async with asyncio.timeout(self.timeout_s):
                request = await context.read()
        except TimeoutError:
            raise Overloaded(
                f"the request did not arrive whole within {self.timeout_s:g} s; send it at once"
            ) from None
        if request is grpc.aio.EOF:
            raise RequestError("a unary method takes exactly one request message")
        return request


SMALL_MESSAGE_BYTES = 64 << 10
"""The largest request of a method whose requests are not counted against their principal's
share (every method but the Execute family): their requests name a session, a path, a symbol,
a mode; nothing needs more. Larger ones were held, and copied, while their calls ran or waited
(attacker rounds 166 and 167: 16 MiB workspace paths in OpenSession, padded ReloadPolicies
waiting on the reload lock, reflection symbols its answers echo)."""


@dataclasses.dataclass(frozen=True)
class _Oversized:
    """A request past SMALL_MESSAGE_BYTES, in place of the message (never decoded)."""

    size: int

    def refusal(self) -> RequestError:
        return RequestError(
            f"this method takes requests of at most {SMALL_MESSAGE_BYTES} bytes; this one has "
            f"{self.size}"
        )


def _small_only(deserialize: Callable[[bytes], object] | None) -> Callable[[bytes], object]:
    def deserialize_small(data: bytes) -> object:
        if len(data) > SMALL_MESSAGE_BYTES:
            return _Oversized(len(data))
        return deserialize(data) if deserialize else data

    return deserialize_small


async def _small_messages(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
    async for message in requests:
        if isinstance(message, _Oversized):
            raise message.refusal()
        yield message


async def _answer(result: object, context: Context) -> object:
    """What a handler's behaviour gave: awaited, or its messages written one by one."""
    if inspect.isasyncgen(result):
        async for response in result:
            await context.write(response)
        return None
    return await result  # type: ignore[misc]


def _taking_a_stream(
    handle: Callable[..., Awaitable[object]], handler: Handler, small: bool
) -> Handler:
    """A handler of `handle` in place of `handler`, its requests taken as a stream (and
    refused past SMALL_MESSAGE_BYTES when `small`)."""
    make = (
        grpc.stream_stream_rpc_method_handler
        if handler.response_streaming
        else grpc.stream_unary_rpc_method_handler
    )
    deserialize = handler.request_deserializer
    return make(
        handle,
        request_deserializer=_small_only(deserialize) if small else deserialize,
        response_serializer=handler.response_serializer,
    )


class ReceiptTurns(grpc.aio.ServerInterceptor):
    """Reads each call's request in one of its principal's receipt turns."""

    def __init__(
        self,
        receipts: Receipts,
        resolver: CallerResolver,
        bounded_streams: Collection[str],
        counted: Collection[str],
    ) -> None:
        """`bounded_streams`: client-streaming methods left as they are; `counted`: the methods
        whose requests are counted against their principal's share (any size up to
        max_request_bytes); the others' requests must be small."""
        self._receipts = receipts
        self._resolver = resolver
        self._bounded_streams = frozenset(bounded_streams)
        self._counted = frozenset(counted)

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> Handler | None:
        handler = await continuation(handler_call_details)
        if handler is None or handler_call_details.method in self._bounded_streams:
            return handler
        small = handler_call_details.method not in self._counted
        if handler.request_streaming:
            return self._whole_stream(handler, small)
        return self._one_message(handler, small)

    def _one_message(self, handler: Handler, small: bool) -> Handler:
        behaviour: Any = handler.unary_unary or handler.unary_stream
        receipts, resolver = self._receipts, self._resolver

        async def handle(requests: AsyncIterator[object], context: Context) -> object:
            try:
                principal = resolver.resolve(context).principal
                async with receipts.turn(principal):
                    request = await receipts.received(context)
                if isinstance(request, _Oversized):
                    raise request.refusal()
                answer = behaviour(request, context)
                del request
            except TooljailError as exc:
                refusal = Refusal.of(exc)
            else:
                return await _answer(answer, context)
            await refusal.end(context)
            return None

        return _taking_a_stream(handle, handler, small)

    def _whole_stream(self, handler: Handler, small: bool) -> Handler:
        behaviour: Any = handler.stream_unary or handler.stream_stream
        receipts, resolver = self._receipts, self._resolver

        async def handle(requests: AsyncIterator[object], context: Context) -> object:
            try:
                principal = resolver.resolve(context).principal
                async with receipts.turn(principal):
                    checked = _small_messages(requests) if small else requests
                    return await _answer(behaviour(checked, context), context)
            except TooljailError as exc:
                refusal = Refusal.of(exc)
            await refusal.end(context)
            return None

        return _taking_a_stream(handle, handler, small)
