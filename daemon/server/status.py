"""The one place where errors become gRPC statuses."""

from __future__ import annotations

import grpc

from daemon.errors import (
    DeadlineExceeded,
    NotFound,
    Overloaded,
    PermissionDenied,
    RequestError,
    RequestTooLarge,
    TooljailError,
    Unauthenticated,
    Unavailable,
)
from daemon.text import wire_safe

_STATUS: tuple[tuple[type[TooljailError], grpc.StatusCode], ...] = (
    (RequestError, grpc.StatusCode.INVALID_ARGUMENT),
    (NotFound, grpc.StatusCode.NOT_FOUND),
    (RequestTooLarge, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (Overloaded, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (Unavailable, grpc.StatusCode.UNAVAILABLE),
    (Unauthenticated, grpc.StatusCode.UNAUTHENTICATED),
    (PermissionDenied, grpc.StatusCode.PERMISSION_DENIED),
    (DeadlineExceeded, grpc.StatusCode.DEADLINE_EXCEEDED),
)


def status_for(exc: TooljailError) -> grpc.StatusCode:
    """The status code a caller's program sees for this error."""
    for kind, code in _STATUS:
        if isinstance(exc, kind):
            return code
    return grpc.StatusCode.INTERNAL


#: Status messages travel in a header that clients cap (16 KB in gRPC); keep them well below.
MAX_STATUS_CHARS = 2_000


def status_message(exc: TooljailError) -> str:
    """The error's text for a status, shortened so that it always reaches the caller."""
    text = wire_safe(str(exc))
    if len(text) <= MAX_STATUS_CHARS:
        return text
    return text[: MAX_STATUS_CHARS - 40] + f" ... [{len(text) - MAX_STATUS_CHARS + 40} chars cut]"
