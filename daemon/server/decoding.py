"""Registration of tooljail's services: request decoding the servicer can answer for, and the one
place where a TooljailError a handler raises becomes the caller's gRPC status.

grpc runs the request deserializer before any servicer code: when the bytes are not a valid
message (invalid UTF-8 in a string, a corrupt or truncated wire format, nesting deeper than
protobuf allows) the generated handlers let the DecodeError escape and the caller gets UNKNOWN
"Unexpected DecodeError". Here the deserializer never raises: it hands the servicer an
``Undecodable`` marker instead, and the handler answers INVALID_ARGUMENT saying what was wrong.

A method may also name a converter (daemon.server.convert) from its message to what the
servicer works with; the servicer is then handed a ``Decoded``, the request's bytes, and awaits
its value once it has admitted the caller (a caller without credentials costs no conversion). A
small request is decoded and converted then on the event loop; a large one in a worker thread, a
few at a time: a Struct of a million values takes a second to convert, which would hold every
other caller on the loop, and a flood of them would take every worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Generic, TypeVar, cast

import grpc
from google.protobuf import message as protobuf_message
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor
from google.protobuf.message_factory import GetMessageClass

from daemon.errors import Overloaded, RequestError, TooljailError
from daemon.server.status import Refusal

Context = grpc.aio.ServicerContext[Any, Any]
UnaryBehaviour = Callable[[Any, Context], Awaitable[Any]]
StreamBehaviour = Callable[[Any, Context], AsyncGenerator[Any, None]]
StreamHandler = Callable[[Any, Context], Awaitable[None]]


@dataclasses.dataclass(frozen=True)
class Undecodable:
    """Bytes that did not decode as the method's request message."""

    message_name: str
    reason: str

    def status_message(self) -> str:
        return (
            f"the request is not a valid {self.message_name} message ({self.reason}); "
            "send it encoded by protobuf from tooljail's proto files, with every string field "
            "valid UTF-8 and Struct values nested at most about 30 levels deep"
        )


LARGE_REQUEST_BYTES = 8 * 1024
"""Requests from this size on are decoded and converted in a worker thread. Bytes bound the work
loosely (a Struct value can take 2 bytes on the wire and 2 µs to convert): 8 KB, at most about
8 ms on the loop."""
LARGE_DECODES_AT_ONCE = 2
"""Large requests decoded at the same time (the others wait): the worker threads are shared with
every call's own off-loop work."""

T = TypeVar("T")
Converter = Callable[[Any], object]
"""From a request message to what the servicer works with; raises RequestError."""
Decode = Callable[[bytes], object]


@dataclasses.dataclass(frozen=True)
class Weighed:
    """What a converter may return: the converted request, and about how many bytes it holds
    (`Decoded.converted_size`)."""

    value: object
    size: int


class Decoded(Generic[T]):
    """A request for a method with a converter, decoded and converted when the servicer asks."""

    def __init__(self, data: bytes, decode: Decode, large: asyncio.Semaphore) -> None:
        self._data = data
        self._decode = decode
        self._large = large
        self.size = len(data)
        """The request's bytes as received."""
        self.converted_size = 0
        """About how many bytes the converted request holds (known once converted)."""

    async def get(self) -> T:
        """The converted request (asked for once); RequestError when it is not valid."""
        data, self._data = self._data, b""  # gone with the conversion, not with the RPC
        if len(data) < LARGE_REQUEST_BYTES:
            outcome = self._decode(data)
        else:
            async with self._large:
                outcome = await asyncio.to_thread(self._decode, data)
        del data  # not kept by the traceback of the error below
        if isinstance(outcome, Undecodable):
            raise RequestError(outcome.status_message())
        if isinstance(outcome, RequestError):
            raise outcome
        if isinstance(outcome, Weighed):
            self.converted_size = outcome.size
            outcome = outcome.value
        return cast(T, outcome)


def _decoder(message_class: type[protobuf_message.Message], converter: Converter | None) -> Decode:
    """Bytes to the request message (then converted, when the method has a converter); never
    raises for what the caller sent: it is an Undecodable or a RequestError instead."""
    name = message_class.DESCRIPTOR.full_name

    def decode(data: bytes) -> object:
        try:
            message = message_class.FromString(data)
        except (protobuf_message.DecodeError, RecursionError, ValueError) as exc:
            return Undecodable(name, str(exc) or type(exc).__name__)
        if converter is None:
            return message
        try:
            return converter(message)
        except RequestError as exc:
            # Its traceback holds the converter's frames, and through them the message
            return exc.with_traceback(None)

    return decode


def _deserializer(decode: Decode, converted: bool, large: asyncio.Semaphore) -> Decode:
    def deserialize(data: bytes) -> object:
        return Decoded[Any](data, decode, large) if converted else decode(data)

    return deserialize


# Each handler ends a refused call only once it let go of its request (see `Refusal`).


def _guarded_unary(behaviour: UnaryBehaviour) -> UnaryBehaviour:
    async def handle(request: object, context: Context) -> Any:
        if isinstance(request, Undecodable):
            refusal = Refusal(grpc.StatusCode.INVALID_ARGUMENT, request.status_message())
        else:
            try:
                return await behaviour(request, context)
            except TooljailError as exc:
                refusal = Refusal.of(exc)
        del request
        await refusal.end(context)
        return None

    return handle


def _guarded_stream(behaviour: StreamBehaviour, take_timeout_s: float) -> StreamHandler:
    async def handle(request: object, context: Context) -> None:
        if isinstance(request, Undecodable):
            refusal = Refusal(grpc.StatusCode.INVALID_ARGUMENT, request.status_message())
        else:
            try:
                await _written(behaviour(request, context), context, take_timeout_s)
            except TooljailError as exc:
                refusal = Refusal.of(exc)
            else:
                return
        del request
        await refusal.end(context)

    return handle


async def _decoded(requests: AsyncIterator[object]) -> AsyncIterator[object]:
    """A client stream's messages; one that did not decode ends it with RequestError."""
    async for request in requests:
        if isinstance(request, Undecodable):
            raise RequestError(request.status_message())
        yield request


def _guarded_bidi(behaviour: StreamBehaviour, take_timeout_s: float) -> StreamHandler:
    async def handle(requests: AsyncIterator[object], context: Context) -> None:
        try:
            await _written(behaviour(_decoded(requests), context), context, take_timeout_s)
        except TooljailError as exc:
            refusal = Refusal.of(exc)
        else:
            return
        del requests
        await refusal.end(context)

    return handle


async def _written(
    responses: AsyncGenerator[Any, None], context: Context, take_timeout_s: float
) -> None:
    """Each response sent as it comes. A client that takes none of them for `take_timeout_s`
    (its HTTP/2 window full) has the stream ended: the responses' source is closed then, so
    that what it holds (calls, answers, inputs) goes and its calls not started are not run,
    and the client reads the reason after what it was sent (attacker round 162: unread
    streams held every call and answer of theirs without end). A client gone while a message
    waited ends it as a cancel would, without an error logged (the same round: each such
    cancel was logged with a traceback)."""
    async with contextlib.aclosing(responses):
        async for response in responses:
            try:
                async with asyncio.timeout(take_timeout_s):
                    await context.write(response)
            except grpc.aio.InternalError:
                return  # grpc's core failed the write: the call is over, nobody reads it
            except TimeoutError:
                raise Overloaded(
                    f"you took no message of this stream for {take_timeout_s:g} s while one "
                    "waited, so tooljail ended it: its calls that had not started were not run. "
                    "Read a stream's messages as they come"
                ) from None


def _handler(
    servicer: object,
    method: MethodDescriptor,
    converter: Converter | None,
    large: asyncio.Semaphore,
    take_timeout_s: float,
) -> grpc.RpcMethodHandler[Any, Any]:
    request_class = GetMessageClass(method.input_type)
    response_class = GetMessageClass(method.output_type)
    behaviour = getattr(servicer, method.name)
    decode = _decoder(request_class, converter)
    deserializer = _deserializer(decode, converter is not None, large)
    serializer = response_class.SerializeToString
    if method.client_streaming and method.server_streaming:
        return grpc.stream_stream_rpc_method_handler(
            _guarded_bidi(behaviour, take_timeout_s),
            request_deserializer=deserializer,
            response_serializer=serializer,
        )
    if method.client_streaming:
        raise TypeError(f"{method.full_name}: client streaming alone is not supported by tooljail")
    if method.server_streaming:
        return grpc.unary_stream_rpc_method_handler(
            _guarded_stream(behaviour, take_timeout_s),
            request_deserializer=deserializer,
            response_serializer=serializer,
        )
    return grpc.unary_unary_rpc_method_handler(
        _guarded_unary(behaviour),
        request_deserializer=deserializer,
        response_serializer=serializer,
    )


def add_service(
    server: grpc.aio.Server,
    service: ServiceDescriptor,
    servicer: object,
    converters: Mapping[str, Converter] | None = None,
    take_timeout_s: float = 60.0,
) -> None:
    """Register every method of ``service`` on ``server``, implemented by ``servicer``; a method
    named in ``converters`` is handed its request as ``Decoded``. A streaming method's client
    must take each message within ``take_timeout_s`` (see ``_written``)."""
    converters = converters or {}
    large = asyncio.Semaphore(LARGE_DECODES_AT_ONCE)
    unknown = set(converters) - {method.name for method in service.methods}
    if unknown:
        raise TypeError(f"{service.full_name} has no methods {sorted(unknown)}")
    handlers = {
        method.name: _handler(servicer, method, converters.get(method.name), large, take_timeout_s)
        for method in service.methods
    }
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),)
    )
    # Registered handlers skip the generic lookup per call.
    server.add_registered_method_handlers(service.full_name, handlers)
