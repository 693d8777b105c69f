"""Registration of tooljail's services: request decoding the servicer can answer for, and the one
place where a TooljailError a handler raises becomes the caller's gRPC status.

grpc runs the request deserializer before any servicer code: when the bytes are not a valid
message (invalid UTF-8 in a string, a corrupt or truncated wire format, nesting deeper than
protobuf allows) the generated handlers let the DecodeError escape and the caller gets UNKNOWN
"Unexpected DecodeError". Here the deserializer never raises: it hands the servicer an
``Undecodable`` marker instead, and the handler answers INVALID_ARGUMENT saying what was wrong.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from google.protobuf import message as protobuf_message
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor
from google.protobuf.message_factory import GetMessageClass

from daemon.errors import RequestError, TooljailError
from daemon.server.status import status_for, status_message

Context = grpc.aio.ServicerContext[Any, Any]
UnaryBehaviour = Callable[[Any, Context], Awaitable[Any]]
StreamBehaviour = Callable[[Any, Context], AsyncIterator[Any]]


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


def _tolerant_deserializer(
    message_class: type[protobuf_message.Message],
) -> Callable[[bytes], object]:
    name = message_class.DESCRIPTOR.full_name

    def deserialize(data: bytes) -> object:
        try:
            return message_class.FromString(data)
        except (protobuf_message.DecodeError, RecursionError, ValueError) as exc:
            return Undecodable(name, str(exc) or type(exc).__name__)

    return deserialize


def _guarded_unary(behaviour: UnaryBehaviour) -> UnaryBehaviour:
    async def handle(request: object, context: Context) -> Any:
        if isinstance(request, Undecodable):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.status_message())
        try:
            return await behaviour(request, context)
        except TooljailError as exc:
            await context.abort(status_for(exc), status_message(exc))

    return handle


def _guarded_stream(behaviour: StreamBehaviour) -> StreamBehaviour:
    async def handle(request: object, context: Context) -> AsyncIterator[Any]:
        if isinstance(request, Undecodable):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.status_message())
        try:
            async for response in behaviour(request, context):
                yield response
        except TooljailError as exc:
            await context.abort(status_for(exc), status_message(exc))

    return handle


async def _decoded(requests: AsyncIterator[object]) -> AsyncIterator[object]:
    """A client stream's messages; one that did not decode ends it with RequestError."""
    async for request in requests:
        if isinstance(request, Undecodable):
            raise RequestError(request.status_message())
        yield request


def _guarded_bidi(behaviour: StreamBehaviour) -> StreamBehaviour:
    async def handle(requests: AsyncIterator[object], context: Context) -> AsyncIterator[Any]:
        try:
            async for response in behaviour(_decoded(requests), context):
                yield response
        except TooljailError as exc:
            await context.abort(status_for(exc), status_message(exc))

    return handle


def _handler(servicer: object, method: MethodDescriptor) -> grpc.RpcMethodHandler[Any, Any]:
    request_class = GetMessageClass(method.input_type)
    response_class = GetMessageClass(method.output_type)
    behaviour = getattr(servicer, method.name)
    deserializer = _tolerant_deserializer(request_class)
    serializer = response_class.SerializeToString
    if method.client_streaming and method.server_streaming:
        return grpc.stream_stream_rpc_method_handler(
            _guarded_bidi(behaviour),
            request_deserializer=deserializer,
            response_serializer=serializer,
        )
    if method.client_streaming:
        raise TypeError(f"{method.full_name}: client streaming alone is not supported by tooljail")
    if method.server_streaming:
        return grpc.unary_stream_rpc_method_handler(
            _guarded_stream(behaviour),
            request_deserializer=deserializer,
            response_serializer=serializer,
        )
    return grpc.unary_unary_rpc_method_handler(
        _guarded_unary(behaviour),
        request_deserializer=deserializer,
        response_serializer=serializer,
    )


def add_service(server: grpc.aio.Server, service: ServiceDescriptor, servicer: object) -> None:
    """Register every method of ``service`` on ``server``, implemented by ``servicer``."""
    handlers = {method.name: _handler(servicer, method) for method in service.methods}
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),)
    )
    # Registered handlers skip the generic lookup per call.
    server.add_registered_method_handlers(service.full_name, handlers)
