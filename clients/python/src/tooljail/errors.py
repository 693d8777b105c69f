"""What can go wrong talking to the daemon, as a small exception hierarchy mapped from gRPC
statuses. What the *model* did wrong is not here: a denied or failed call is an answer whose
tool_result has `is_error` set."""

from __future__ import annotations

import grpc


class TooljailError(Exception):
    """Any failure of a call to the daemon (the RPC itself, not the tool)."""

    code: grpc.StatusCode | None = None

    def __init__(self, message: str, code: grpc.StatusCode | None = None) -> None:
        super().__init__(message)
        self.code = code if code is not None else type(self).code


class InvalidArgument(TooljailError):
    """The request was malformed (the message says what to fix)."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(TooljailError):
    """The session (or approval) does not exist, or is not the caller's."""

    code = grpc.StatusCode.NOT_FOUND


class Unauthenticated(TooljailError):
    """No valid credentials: a token or client certificate the daemon accepts is needed."""

    code = grpc.StatusCode.UNAUTHENTICATED


class PermissionDenied(TooljailError):
    """The caller may not do this (e.g. an admin RPC without being an admin)."""

    code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhausted(TooljailError):
    """The daemon is at a limit (calls in flight, sessions, streams): retry later."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class Unavailable(TooljailError):
    """The daemon cannot be reached, is stopping, or its policy engine is down."""

    code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceeded(TooljailError):
    """The call's deadline passed before the answer came."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED


_BY_CODE: dict[grpc.StatusCode, type[TooljailError]] = {
    cls.code: cls
    for cls in (
        InvalidArgument,
        NotFound,
        Unauthenticated,
        PermissionDenied,
        ResourceExhausted,
        Unavailable,
        DeadlineExceeded,
    )
    if cls.code is not None
}


def from_rpc_error(error: grpc.RpcError) -> TooljailError:
    """The exception for a failed RPC, blocking or asyncio (its status code picks the class)."""
    code_of = getattr(error, "code", None)
    details_of = getattr(error, "details", None)
    code = code_of() if callable(code_of) else None
    details = details_of() if callable(details_of) else str(error)
    cls = _BY_CODE.get(code, TooljailError) if isinstance(code, grpc.StatusCode) else TooljailError
    return cls(str(details or code), code if isinstance(code, grpc.StatusCode) else None)
