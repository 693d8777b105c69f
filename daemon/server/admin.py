"""The Admin servicer: operator actions (policy reload, status, session modes and grants), for
admin principals only."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import grpc

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon._generated.tooljail.v1 import executor_pb2_grpc as pb_grpc
from daemon.errors import PermissionDenied
from daemon.models import Caller, StatusSnapshot
from daemon.policy.reloader import PolicyReloader
from daemon.server import convert
from daemon.server.identity import CallerResolver
from daemon.sessions.manager import SessionManager

Context = grpc.aio.ServicerContext[object, object]


class AdminService(pb_grpc.AdminServicer):
    """tooljail.v1.Admin. Errors raised here become statuses in daemon.server.decoding."""

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
        self._admin(context)
        return convert.reload_to_proto(await self._reloader.reload())

    async def Status(self, request: pb.StatusRequest, context: Context) -> pb.StatusResponse:
        caller = self._admin(context)
        return convert.status_to_proto(await self._status(), caller)

    async def SetSessionMode(
        self, request: pb.SetSessionModeRequest, context: Context
    ) -> pb.Session:
        self._admin(context)
        return convert.session_to_proto(self._sessions.set_mode(request.session_id, request.mode))

    async def ListGrants(
        self, request: pb.ListGrantsRequest, context: Context
    ) -> pb.ListGrantsResponse:
        self._admin(context)
        return convert.grants_to_proto(self._sessions.get(request.session_id))
