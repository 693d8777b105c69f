"""The Admin servicer: operator actions (policy reload)."""

from __future__ import annotations

import grpc

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon._generated.tooljail.v1 import executor_pb2_grpc as pb_grpc
from daemon.policy.reloader import PolicyReloader


class AdminService(pb_grpc.AdminServicer):
    """tooljail.v1.Admin."""

    def __init__(self, reloader: PolicyReloader) -> None:
        self._reloader = reloader

    async def ReloadPolicies(
        self, request: pb.ReloadPoliciesRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> pb.ReloadPoliciesResponse:
        result = await self._reloader.reload()
        return pb.ReloadPoliciesResponse(
            policy_revision=result.revision, reloaded=result.reloaded, error=result.error
        )
