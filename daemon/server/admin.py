"""The Admin servicer: operator actions (policy reload, status, session modes and grants), for
admin principals only; and the approvers' RPCs (list, approve, deny asks), for whoever the
policy lets answer."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import grpc

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon._generated.tooljail.v1 import executor_pb2_grpc as pb_grpc
from daemon.calls.approvals import ApprovalDesk
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
        status: Callable[[], Awaitable[StatusSnapshot]],
        sessions: SessionManager,
        desk: ApprovalDesk,
    ) -> None:
        self._sessions = sessions
        self._desk = desk
        self._reloader = reloader
        self._resolver = resolver
        self._status = status

    def _admin(self, context: Context) -> Caller:
        caller = self._resolver.resolve(context)
        if not caller.admin:
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
        caller = self._admin(context)
        session = await self._sessions.set_mode(
            request.session_id, request.mode, caller, admin=True
        )
        return convert.session_to_proto(session)

    async def ListGrants(
        self, request: pb.ListGrantsRequest, context: Context
    ) -> pb.ListGrantsResponse:
        caller = self._admin(context)
        return convert.grants_to_proto(self._sessions.get(request.session_id, caller, admin=True))

    async def ListPendingApprovals(
        self, request: pb.ListPendingApprovalsRequest, context: Context
    ) -> pb.ListPendingApprovalsResponse:
        caller = self._resolver.resolve(context)
        asks = await self._desk.listed(caller)
        return pb.ListPendingApprovalsResponse(
            approvals=[convert.pending_to_proto(a) for a in asks]
        )

    async def Approve(
        self, request: pb.AnswerApprovalRequest, context: Context
    ) -> pb.PendingApproval:
        return await self._answer(request, context, approve=True)

    async def Deny(self, request: pb.AnswerApprovalRequest, context: Context) -> pb.PendingApproval:
        return await self._answer(request, context, approve=False)

    async def _answer(
        self, request: pb.AnswerApprovalRequest, context: Context, *, approve: bool
    ) -> pb.PendingApproval:
        caller = self._resolver.resolve(context)
        answered = await self._desk.answer(
            request.approval_id,
            approve,
            caller,
            scope=convert.answer_scope(request.scope),
            note=request.note,
        )
        return convert.pending_to_proto(answered)
