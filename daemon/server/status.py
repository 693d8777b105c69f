"""The one place where errors become gRPC statuses."""

from __future__ import annotations

import dataclasses
from typing import Any

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


#: Status messages travel in a header that clients cap (8 KB soft, 16 KB hard in gRPC), percent-
#: encoded: a byte of UTF-8 outside printable ASCII takes 3. So they are cut in UTF-8 bytes,
#: which keeps the worst case (every byte encoded) at 6 KB (attacker round 167: 2,000 characters
#: of 2 bytes each reached the client as "metadata size exceeds soft limit").
MAX_STATUS_BYTES = 2_000


def status_message(exc: TooljailError) -> str:
    """The error's text for a status, shortened so that it always reaches the caller."""
    raw = str(exc)
    text = wire_safe(raw[: 2 * MAX_STATUS_BYTES])  # what is past this could not be kept anyway
    encoded = text.encode()
    if len(raw) <= 2 * MAX_STATUS_BYTES and len(encoded) <= MAX_STATUS_BYTES:
        return text
    kept = encoded[: MAX_STATUS_BYTES - 40].decode(errors="ignore")
    return kept + f" ... [{len(raw) - len(kept)} chars cut]"


@dataclasses.dataclass(frozen=True)
class Refusal:
    """The status a call is ended with, and nothing else of what ended it.

    A refused call's request must not outlive it: grpc keeps the exception that ended a call
    with the call's state for a while, and that exception's traceback keeps the frames it went
    through, with their locals; an error keeps its own frames and the errors it was raised
    from (attacker round 166: refused 16 MiB requests piled up until the daemon was killed at
    its memory limit). So a handler keeps a Refusal past its `except`, lets go of its request,
    and only then ends the call."""

    code: grpc.StatusCode
    message: str

    @classmethod
    def of(cls, exc: TooljailError) -> Refusal:
        return cls(status_for(exc), status_message(exc))

    async def end(self, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        """End the call with this status (nothing when grpc's core takes none: a message the
        client never took still waits, and the call ends with its connection)."""
        try:
            await context.abort(self.code, self.message)
        except grpc.aio.InternalError:
            return
