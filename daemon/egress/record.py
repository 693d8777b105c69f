"""What the audit keeps of one egress connection, and how a connection's handling ends early."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ConnectionRecord:
    """What the audit keeps of one connection."""

    tool_use_id: str
    session: str
    principal: str
    started: float = field(default_factory=time.monotonic)
    fields: dict[str, Any] = field(default_factory=dict)
    opaque: bool = False
    """The decision lets a tunnel carry something other than TLS naming its host."""
    bytes_up: int = 0
    bytes_down: int = 0

    def line(self) -> dict[str, Any]:
        """The audit line."""
        return {
            "event": "egress",
            "tool_use_id": self.tool_use_id,
            "session_id": self.session,
            "principal": self.principal,
            **self.fields,
            "bytes_up": self.bytes_up,
            "bytes_down": self.bytes_down,
            "duration_ms": int((time.monotonic() - self.started) * 1000),
        }


class Ended(Exception):
    """The connection ended before anything was to be carried (not a refusal)."""


class Refused(Exception):
    """The connection is refused; the message is for the model, `status` the HTTP answer's
    (0: the connection is just closed, e.g. inside a tunnel already established)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
