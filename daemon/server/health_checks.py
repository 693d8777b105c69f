"""grpc's health service, with what a caller can make it hold bounded (attacker round 166): a
service name is at most MAX_SERVICE_NAME characters (the names it knows are short; a 16 MiB one
was held by each Watch stream for as long as it stayed open), a principal may have
MAX_WATCHES_PER_PRINCIPAL Watch streams open, and no request outlives its call."""

from __future__ import annotations

from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2

from daemon.server.identity import CallerResolver

MAX_SERVICE_NAME = 256
MAX_WATCHES_PER_PRINCIPAL = 16
Context = grpc.aio.ServicerContext[Any, Any]


def _small_copy(request: health_pb2.HealthCheckRequest) -> health_pb2.HealthCheckRequest | None:
    """The request with its service name alone, or None when the name is too long to be one
    this daemon serves."""
    if len(request.service) > MAX_SERVICE_NAME:
        return None
    return health_pb2.HealthCheckRequest(service=request.service)


class BoundedHealth(health.aio.HealthServicer):  # type: ignore[misc]
    """The health service; `set` and `enter_graceful_shutdown` as grpc's."""

    def __init__(self, resolver: CallerResolver) -> None:
        super().__init__()
        self._resolver = resolver
        self._watches: dict[str, int] = {}

    async def Check(self, request: health_pb2.HealthCheckRequest, context: Any) -> Any:
        small = _small_copy(request)
        del request
        if small is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, "no service has such a long name")
        return await super().Check(small, context)

    async def Watch(self, request: health_pb2.HealthCheckRequest, context: Any) -> None:
        small = _small_copy(request)
        del request
        if small is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, "no service has such a long name")
        principal = self._resolver.resolve(context).principal
        open_now = self._watches.get(principal, 0)
        if open_now >= MAX_WATCHES_PER_PRINCIPAL:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"you have {open_now} Watch streams open, the most one caller may; end one",
            )
        self._watches[principal] = open_now + 1
        try:
            await super().Watch(small, context)
        finally:
            self._watches[principal] -= 1
            if not self._watches[principal]:
                del self._watches[principal]
