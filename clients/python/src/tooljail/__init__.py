"""tooljail's Python client: run LLM agents' tool calls through a tooljail daemon.

    from tooljail import Client

See `Client` (blocking), `tooljail.aio.AsyncClient` (asyncio) and `tooljail.anthropic` (the
Messages API loop).
"""

from tooljail.client import Client
from tooljail.connection import Connection
from tooljail.errors import (
    DeadlineExceeded,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    TooljailError,
    Unauthenticated,
    Unavailable,
)
from tooljail.types import Answer, Decision, Progress, Report, Session, ToolDefinition

__version__ = "1.0.0"
PROTOCOL = "tooljail.v1"
"""The wire protocol this client speaks (buf breaking guards it)."""

__all__ = [
    "PROTOCOL",
    "Answer",
    "Client",
    "Connection",
    "DeadlineExceeded",
    "Decision",
    "InvalidArgument",
    "NotFound",
    "PermissionDenied",
    "Progress",
    "Report",
    "ResourceExhausted",
    "Session",
    "ToolDefinition",
    "TooljailError",
    "Unauthenticated",
    "Unavailable",
]
