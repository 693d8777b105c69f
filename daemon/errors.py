"""One exception root; small subclasses carry what the caller or the model needs to know."""

from __future__ import annotations

from sandbox.backend import SandboxError

__all__ = [
    "ConfinementError",
    "Overloaded",
    "PermissionDenied",
    "PolicyLoadError",
    "RequestError",
    "RequestTooLarge",
    "SandboxError",
    "ToolError",
    "ToolInputError",
    "TooljailError",
    "Unauthenticated",
    "Unavailable",
]


class TooljailError(Exception):
    """Root of every error tooljail raises on purpose."""


class RequestError(TooljailError):
    """The request itself is malformed: the caller's program must fix it (INVALID_ARGUMENT)."""


class RequestTooLarge(TooljailError):
    """The request exceeds a size limit (RESOURCE_EXHAUSTED)."""


class Overloaded(TooljailError):
    """Too many calls in flight and none finished in time (RESOURCE_EXHAUSTED)."""


class Unauthenticated(TooljailError):
    """The caller could not be identified on a listener that requires it (UNAUTHENTICATED)."""


class NotFound(TooljailError):
    """What the request names does not exist for this caller (also when it exists for another:
    nothing of someone else's session may leak)."""


class PermissionDenied(TooljailError):
    """The caller is known but may not use this (PERMISSION_DENIED)."""


class Unavailable(TooljailError):
    """The daemon cannot take calls right now (UNAVAILABLE), e.g. shutting down."""


class DeadlineExceeded(TooljailError):
    """The request's deadline came before its answer could reach the caller; what it did was
    undone (DEADLINE_EXCEEDED)."""


class ToolError(TooljailError):
    """A failure the model should see as an is_error tool_result, with advice on what to do."""


class ToolInputError(ToolError):
    """The tool input failed schema or semantic validation."""


class ConfinementError(ToolError):
    """A path resolves outside the workspace, or to something that must never be touched."""


class PolicyLoadError(TooljailError):
    """A policy failed to compile or load; the message carries OPA's file/row/col details."""
