"""The Admin servicer: operator actions (policy reload, status), for admin principals only."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import grpc

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon._generated.tooljail.v1 import executor_pb2_grpc as pb_grpc
from daemon.errors import PermissionDenied, TooljailError
from daemon.models import Caller
from daemon.policy.reloader import PolicyReloader
from daemon.server import convert
from daemon.server.identity import CallerResolver
from daemon.server.status import status_for, status_message
from daemon.session_manager import SessionManager

Context = grpc.aio.ServicerContext[object, object]


@dataclass(frozen=True)
class StatusSnapshot:
    """What `tooljail status` shows."""

    version: str
    policy_revision: str
    opa_healthy: bool
    docker_healthy: bool
    pool_ready: int
    in_flight: int
    sessions: int
    instance_id: str


class AdminService(pb_grpc.AdminServicer):
    """tooljail.v1.Admin."""

    def __init__(
        self,
        reloader: PolicyReloader,
        resolver: CallerResolver,
        admin_principals: list[str],
        status: Callable[[], Awaitable[StatusSnapshot]],
        sessions: SessionManager,
    ) -> None:
        self._sessions = sessions
        self._reloader = reloader
        self._resolver = resolver
        self._admins = frozenset(admin_principals)
        self._status = status

    def _admin(self, context: Context) -> Caller:
        caller = self._resolver.resolve(context)
        if caller.principal not in self._admins:
            raise PermissionDenied(f"principal {caller.principal!r} may not use the Admin service")
        return caller

    async def ReloadPolicies(
        self, request: pb.ReloadPoliciesRequest, context: Context
    ) -> pb.ReloadPoliciesResponse:
        try:
            self._admin(context)
        except TooljailError as exc:
            await context.abort(status_for(exc), status_message(exc))
        result = await self._reloader.reload()
        return pb.ReloadPoliciesResponse(
            policy_revision=result.revision, reloaded=result.reloaded, error=result.error
        )

    async def Status(self, request: pb.StatusRequest, context: Context) -> pb.StatusResponse:
        try:
            caller = self._admin(context)
        except TooljailError as exc:
            await context.abort(status_for(exc), status_message(exc))
        snapshot = await self._status()
        return pb.StatusResponse(
            version=snapshot.version,
            policy_revision=snapshot.policy_revision,
            opa_healthy=snapshot.opa_healthy,
            docker_healthy=snapshot.docker_healthy,
            pool_ready=snapshot.pool_ready,
            in_flight=snapshot.in_flight,
            sessions=snapshot.sessions,
            instance_id=snapshot.instance_id,
            principal=caller.principal,
        )

    async def SetSessionMode(
        self, request: pb.SetSessionModeRequest, context: Context
    ) -> pb.Session:
        try:
            self._admin(context)
            session = self._sessions.set_mode(request.session_id, request.mode)
        except TooljailError as exc:
            await context.abort(status_for(exc), status_message(exc))
        return convert.session_to_proto(session)

    async def ListGrants(
        self, request: pb.ListGrantsRequest, context: Context
    ) -> pb.ListGrantsResponse:
        try:
            self._admin(context)
            session = self._sessions.get(request.session_id)
        except TooljailError as exc:
            await context.abort(status_for(exc), status_message(exc))
        return convert.grants_to_proto(session)
