"""Refuses a TCP call without a valid bearer token before its request is read.

The services check who is calling once their request has arrived; by then grpc's core has
taken in the whole message (up to max_request_bytes), on as many streams as a connection opens,
for anyone who can reach the port (attacker round 163). A server interceptor runs on the call's
headers alone: a refused call's handler is one that reads nothing and ends the call at once.
Listeners that require an mTLS client certificate do not need it (the handshake refuses first),
nor the Unix socket (its mode and group decide who connects).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeAlias

import grpc

from daemon.server.identity import TCP_REFUSAL, CallerResolver

Continuation: TypeAlias = (
    "Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]]"
)


async def _refuse(
    requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext[bytes, bytes]
) -> None:
    await context.abort(grpc.StatusCode.UNAUTHENTICATED, TCP_REFUSAL)


_REFUSED: grpc.RpcMethodHandler[bytes, None] = grpc.stream_unary_rpc_method_handler(_refuse)


class CredentialGate(grpc.aio.ServerInterceptor):
    """Lets through the calls whose metadata has a valid bearer token, refuses the others."""

    def __init__(self, resolver: CallerResolver) -> None:
        self._resolver = resolver

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        metadata = handler_call_details.invocation_metadata
        if self._resolver.has_valid_token(metadata):
            return await continuation(handler_call_details)
        return _REFUSED
