"""What the daemon answers, as plain typed objects (and the exact Anthropic blocks)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from google.protobuf import json_format

from tooljail._proto.tooljail.v1 import executor_pb2 as pb

Outcome = Literal["allow", "deny", "ask", ""]
"""The policy's decision; "" when the call was never decided (unknown tool, invalid input)."""
_OUTCOMES: dict[int, Outcome] = {pb.ALLOW: "allow", pb.DENY: "deny", pb.ASK: "ask"}


@dataclass(frozen=True)
class ToolDefinition:
    """A tool this caller may use, as ListTools offers it."""

    name: str
    description: str
    input_schema: dict[str, Any]
    read_only: bool
    destructive: bool
    concurrency_safe: bool
    sandboxed: bool
    defer_loading: bool
    origin: str
    """builtin, operator or mcp."""
    anthropic: dict[str, Any] = field(default_factory=dict)
    """The definition as the Messages API takes it (`tools=[...]`), strict where it may be."""


@dataclass(frozen=True)
class Decision:
    """What the policy decided."""

    outcome: Outcome
    reasons: tuple[str, ...]
    decision_id: str
    approval_token: str
    """On ask: send the call again with this token once a person approved it."""


@dataclass(frozen=True)
class Report:
    """How the call ran."""

    sandboxed: bool
    sandbox_id: str
    exit_code: int
    timed_out: bool
    oom_killed: bool
    duration_ms: int
    truncated: bool
    kept_output: str
    """Where an answer too big for its budget was kept whole (Read can page through it)."""
    replayed: bool = False
    """The answer was remembered from an earlier call with this tool_use id: nothing ran now."""


@dataclass(frozen=True)
class Answer:
    """The daemon's answer to one tool_use."""

    tool_use_id: str
    is_error: bool
    text: str
    """Every text block of the tool_result, joined."""
    tool_result: dict[str, Any]
    """The exact Anthropic `tool_result` block to put in the next user message."""
    decision: Decision
    report: Report
    summary: str
    """One line for people."""
    system_messages: tuple[str, ...]
    """What hooks said for the user (not for the model)."""
    images: tuple[tuple[str, bytes], ...] = ()
    """Image blocks of the result: (media type, bytes)."""


@dataclass(frozen=True)
class Progress:
    """Live progress of a running call (for people, never for the model)."""

    tool_use_id: str
    output: str
    files_scanned: int
    message: str


@dataclass(frozen=True)
class Session:
    """A session: a workspace and the state of calls in it."""

    id: str
    workspace: str
    mode: str
    idle_ttl_s: int


def tool_definition(message: pb.ToolDefinition, anthropic: dict[str, Any]) -> ToolDefinition:
    return ToolDefinition(
        name=message.name,
        description=message.description,
        input_schema=json_format.MessageToDict(message.input_schema),
        read_only=message.traits.read_only,
        destructive=message.traits.destructive,
        concurrency_safe=message.traits.concurrency_safe,
        sandboxed=message.traits.sandboxed,
        defer_loading=message.defer_loading,
        origin=message.origin.kind,
        anthropic=anthropic,
    )


def answer(message: pb.ExecuteResponse) -> Answer:
    result = message.result
    texts = [b.text.text for b in result.content if b.HasField("text")]
    images = tuple(
        (b.image.media_type, b.image.data) for b in result.content if b.HasField("image")
    )
    block = json.loads(message.tool_result_json) if message.tool_result_json else {}
    decision = message.decision
    report = message.report
    return Answer(
        tool_use_id=result.tool_use_id,
        is_error=result.is_error,
        text="".join(texts),
        tool_result=block,
        decision=Decision(
            outcome=_OUTCOMES.get(decision.outcome, ""),
            reasons=tuple(decision.reasons),
            decision_id=decision.decision_id,
            approval_token=decision.approval_token,
        ),
        report=Report(
            sandboxed=report.sandboxed,
            sandbox_id=report.sandbox_id,
            exit_code=report.exit_code,
            timed_out=report.timed_out,
            oom_killed=report.oom_killed,
            duration_ms=report.duration_ms,
            truncated=report.truncated,
            kept_output=report.kept_output,
            replayed=report.replayed,
        ),
        summary=message.summary,
        system_messages=tuple(message.system_messages),
        images=images,
    )


def event(message: pb.ExecuteEvent) -> Progress | Answer | None:
    """A stream's event as progress or an answer (None for a kind this client does not know)."""
    if message.HasField("progress"):
        return progress(message.progress)
    if message.HasField("response"):
        return answer(message.response)
    return None


def progress(message: pb.Progress) -> Progress:
    return Progress(
        tool_use_id=message.tool_use_id,
        output=message.output,
        files_scanned=message.files_scanned,
        message=message.message,
    )


def session(message: pb.Session) -> Session:
    return Session(
        id=message.id,
        workspace=message.workspace,
        mode=message.mode,
        idle_ttl_s=message.idle_ttl_s,
    )
