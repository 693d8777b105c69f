"""The Executor servicer: thin handlers that convert, hand over to the pipeline, convert back."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon._generated.tooljail.v1 import executor_pb2_grpc as pb_grpc
from daemon.errors import TooljailError
from daemon.models import Caller
from daemon.pipeline import Pipeline
from daemon.scheduler import Scheduler
from daemon.server import convert
from daemon.server.status import status_for
from daemon.session_manager import SessionManager


def caller_of(context: grpc.aio.ServicerContext[object, object], default_principal: str) -> Caller:
    """Who is calling, from the transport only (never from request fields or metadata)."""
    peer = context.peer() or ""
    transport = peer.split(":", 1)[0] if ":" in peer else "unknown"
    transport = {"ipv4": "tcp", "ipv6": "tcp"}.get(transport, transport)
    return Caller(principal=default_principal, transport=transport)


class ExecutorService(pb_grpc.ExecutorServicer):
    """tooljail.v1.Executor."""

    def __init__(
        self,
        pipeline: Pipeline,
        scheduler: Scheduler,
        sessions: SessionManager,
        default_principal: str,
    ) -> None:
        self._pipeline = pipeline
        self._scheduler = scheduler
        self._sessions = sessions
        self._principal = default_principal

    async def ListTools(
        self, request: pb.ListToolsRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> pb.ListToolsResponse:
        try:
            definitions = await self._pipeline.list_tools(
                request.session_id, caller_of(context, self._principal)
            )
        except TooljailError as exc:
            await context.abort(status_for(exc), str(exc))
        return convert.tools_to_proto(definitions)

    async def Execute(
        self, request: pb.ExecuteRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> pb.ExecuteResponse:
        try:
            call = convert.call_request_from_proto(request)
            outcome = await self._scheduler.execute(call, caller_of(context, self._principal))
        except TooljailError as exc:
            await context.abort(status_for(exc), str(exc))
        return convert.outcome_to_proto(outcome)

    async def ExecuteBatch(
        self, request: pb.ExecuteBatchRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> AsyncIterator[pb.ExecuteResponse]:
        try:
            calls = convert.batch_from_proto(request)
        except TooljailError as exc:
            await context.abort(status_for(exc), str(exc))
        caller = caller_of(context, self._principal)
        try:
            async for outcome in self._scheduler.execute_batch(calls, caller):
                yield convert.outcome_to_proto(outcome)
        except TooljailError as exc:
            await context.abort(status_for(exc), str(exc))

    async def OpenSession(
        self, request: pb.OpenSessionRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> pb.Session:
        try:
            session = await self._sessions.open(
                request.workspace, request.idle_ttl_s, caller_of(context, self._principal)
            )
        except TooljailError as exc:
            await context.abort(status_for(exc), str(exc))
        return convert.session_to_proto(session)

    async def CloseSession(
        self, request: pb.CloseSessionRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> pb.CloseSessionResponse:
        try:
            closed = await self._sessions.close(request.session_id, request.delete_workspace)
        except TooljailError as exc:
            await context.abort(status_for(exc), str(exc))
        return pb.CloseSessionResponse(
            cancelled_calls=closed.cancelled_calls, workspace_deleted=closed.workspace_deleted
        )
