"""The one place where errors become gRPC statuses."""

from __future__ import annotations

import grpc

from daemon.errors import (
    Overloaded,
    PermissionDenied,
    RequestError,
    RequestTooLarge,
    TooljailError,
    Unauthenticated,
    Unavailable,
)

_STATUS: tuple[tuple[type[TooljailError], grpc.StatusCode], ...] = (
    (RequestError, grpc.StatusCode.INVALID_ARGUMENT),
    (RequestTooLarge, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (Overloaded, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (Unavailable, grpc.StatusCode.UNAVAILABLE),
    (Unauthenticated, grpc.StatusCode.UNAUTHENTICATED),
    (PermissionDenied, grpc.StatusCode.PERMISSION_DENIED),
)


def status_for(exc: TooljailError) -> grpc.StatusCode:
    """The status code a caller's program sees for this error."""
    for kind, code in _STATUS:
        if isinstance(exc, kind):
            return code
    return grpc.StatusCode.INTERNAL
