"""Wire-neutral models of what flows through the pipeline (protobuf is converted at the edge)."""

from __future__ import annotations

import base64
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from daemon.text import wire_safe


class Frozen(BaseModel):
    """Base for immutable value objects."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class ToolUse(Frozen):
    """One `tool_use` block emitted by the model."""

    id: str
    """Opaque id; echoed as the result's tool_use_id."""
    name: str
    """Name of the tool the model wants to call."""
    input: dict[str, Any] = Field(default_factory=dict)
    """The arguments, not yet validated."""


class TextContent(Frozen):
    """A text content block of a tool_result."""

    type: Literal["text"] = "text"
    text: str
    """The text the model reads (valid UTF-8: file names that are not show as \\xNN escapes)."""

    @field_validator("text")
    @classmethod
    def _valid_utf8(cls, text: str) -> str:
        return wire_safe(text)


class ImageContent(Frozen):
    """An image content block of a tool_result."""

    type: Literal["image"] = "image"
    media_type: str
    """MIME type, e.g. image/png."""
    data: bytes
    """The raw image bytes (base64-encoded only in JSON)."""


ContentBlock = TextContent | ImageContent


class ToolResult(Frozen):
    """The `tool_result` block answering one tool_use."""

    tool_use_id: str
    """The id of the tool_use this answers."""
    content: tuple[ContentBlock, ...]
    """What the model reads."""
    is_error: bool = False
    """True when the call failed, was refused or could not run."""

    def to_anthropic(self) -> dict[str, Any]:
        """The exact Anthropic Messages API `tool_result` block."""
        blocks: list[dict[str, Any]] = []
        for block in self.content:
            if isinstance(block, TextContent):
                blocks.append({"type": "text", "text": block.text})
            else:
                source = {
                    "type": "base64",
                    "media_type": block.media_type,
                    "data": base64.b64encode(block.data).decode("ascii"),
                }
                blocks.append({"type": "image", "source": source})
        return {
            "type": "tool_result",
            "tool_use_id": self.tool_use_id,
            "content": blocks,
            "is_error": self.is_error,
        }

    def text(self) -> str:
        """All text blocks joined (handy for logs and tests)."""
        return "".join(b.text for b in self.content if isinstance(b, TextContent))


class Outcome(StrEnum):
    """What the policy decided for one call."""

    ALLOW = "allow"
    DENY = "deny"
    ASK = "ask"


class Decision(Frozen):
    """A policy decision as the daemon enforces it."""

    outcome: Outcome | None
    """allow, deny or ask; None when the policy was never asked (unknown tool, invalid input)."""
    reasons: tuple[str, ...] = ()
    """Why, in words shown to the model and the user."""
    decision_id: str = ""
    """Unique id of this decision (for the audit log)."""
    policy_revision: str = ""
    """Revision of the policy that decided (git commit of the policy folder)."""
    approval_token: str = ""
    """Set on ask: the caller sends it back once a human approved."""


class ExecutionReport(Frozen):
    """How the call ran, for the caller's program (not for the model)."""

    sandboxed: bool = False
    """Ran in a disposable container."""
    sandbox_id: str = ""
    """Container id when sandboxed."""
    exit_code: int = 0
    """Process exit code for command-like tools."""
    timed_out: bool = False
    """Killed because it ran past its timeout."""
    oom_killed: bool = False
    """Killed by the kernel for exceeding its memory limit."""
    duration_ms: int = 0
    """Wall time of the execution step."""
    truncated: bool = False
    """The result was cut to fit its budget."""
    original_chars: int = 0
    """Size of the result before any cut."""
    replayed: bool = False
    """The answer was remembered from an earlier call with the same tool_use id; nothing ran now."""
    kept_output: str = ""
    """The result was over its budget and kept whole at this path (the model got a preview)."""


class ExecuteOutcome(Frozen):
    """Everything the daemon answers for one tool_use."""

    result: ToolResult
    decision: Decision
    report: ExecutionReport
    summary: str = ""
    """One line for people, distinct from the model-facing content."""
    turn_budget_chars: int | None = None
    """The policy's budget for the results of the call's turn (the daemon's own; not sent)."""
    system_messages: tuple[str, ...] = ()
    """What hooks said for the user, not the model (each naming its hook)."""


Transport = Literal["unix", "tcp", "tcp+mtls", "inproc", "unknown"]
"""unix: the Unix socket; tcp: TCP with a bearer token; tcp+mtls: TCP with a verified client
certificate; inproc: inside the daemon's process; unknown: anything else."""


class Caller(Frozen):
    """Who is calling, as far as the transport can tell (never from request fields)."""

    principal: str = "anonymous"
    """Authenticated principal name, or the listener's configured default."""
    transport: Transport = "unknown"
    """How the call arrived."""
    admin: bool = False
    """One of the configured admin principals (auth.admin_principals): may use the Admin service
    and act on any session."""


class StatusSnapshot(Frozen):
    """A running daemon's health, as `tooljail status` shows it."""

    version: str
    policy_revision: str
    opa_healthy: bool
    docker_healthy: bool
    pool_ready: int
    """Warm containers ready."""
    in_flight: int
    """Calls running."""
    sessions: int
    """Sessions open (the default ones included)."""
    instance_id: str
