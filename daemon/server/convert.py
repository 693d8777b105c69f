"""The only module that touches generated protobuf code: converts at the edge, both ways."""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Literal

from google.protobuf import json_format, struct_pb2

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon.calls.batch_hooks import BatchNotes
from daemon.calls.pipeline import CallRequest
from daemon.errors import RequestError
from daemon.models import (
    Caller,
    Decision,
    ExecuteOutcome,
    ExecutionReport,
    ImageContent,
    Outcome,
    StatusSnapshot,
    TextContent,
    ToolResult,
    ToolUse,
)
from daemon.policy.approval import Scope
from daemon.policy.gate import ApprovalRequest
from daemon.policy.pending import PendingAsk
from daemon.policy.reloader import ReloadResult
from daemon.sessions.manager import ClosedSession
from daemon.sessions.session import Session
from daemon.text import printable, wire_safe
from daemon.tools.contract import ProgressUpdate
from daemon.tools.registry import ToolDefinition

_OUTCOMES = {None: pb.OUTCOME_UNSPECIFIED, Outcome.ALLOW: pb.ALLOW, Outcome.DENY: pb.DENY,
             Outcome.ASK: pb.ASK}  # fmt: skip


def tool_use_from_proto(message: pb.ToolUse, where: str = "tool_use") -> ToolUse:
    """A well-formed ToolUse, or RequestError naming the missing part."""
    if not message.id:
        raise RequestError(f"{where}.id is empty: every tool_use needs the id the model gave it")
    if not message.name:
        raise RequestError(f"{where}.name is empty: name the tool to call")
    for part, text in (("id", message.id), ("name", message.name)):
        if len(text) > MAX_ID_CHARS:
            raise RequestError(
                f"{where}.{part} is longer than {MAX_ID_CHARS} characters ({len(text)}); models "
                "give ids and names of a few dozen"
            )
    # Counted on the message, before anything is converted: each value costs about 70 bytes
    # converted, whatever it cost on the wire.
    if values_in(message.input, MAX_INPUT_VALUES) is None:
        raise RequestError(
            f"{where}.input holds more than {MAX_INPUT_VALUES} values (objects, arrays, "
            "numbers, texts); no tool takes that many: send the data as text, or in several calls"
        )
    try:
        raw = json_format.MessageToDict(message.input) if message.HasField("input") else {}
    except ValueError as exc:  # NaN or an infinite number: not JSON, so not a tool input
        raise RequestError(f"{where}.input is not valid JSON: {exc}") from exc
    return ToolUse(id=message.id, name=message.name, input=raw)


MAX_ID_CHARS = 256
"""The longest tool_use id or tool name taken: each is kept in the audit, the replay memory
and every answer (attacker round 143: 150 ids of 7.5 MB held 1.1 GB of the daemon's memory)."""
MAX_INPUT_VALUES = 100_000
"""Values one tool input may hold. Each costs about 70 bytes once decoded, whatever it cost on
the wire (`{}` costs 2): 15 MB of them took 270 MB, held while their turn lasts."""
MAX_REQUEST_VALUES = 2 * MAX_INPUT_VALUES
"""Values the tool inputs of one batch may hold together."""


def values_in(struct: struct_pb2.Struct, limit: int) -> int | None:
    """How many values `struct` holds, or None past `limit` (counting stops there)."""
    count = 0
    stack: list[struct_pb2.Struct | struct_pb2.ListValue] = [struct]
    while stack:
        item = stack.pop()
        values = item.fields.values() if isinstance(item, struct_pb2.Struct) else item.values
        for value in values:
            count += 1
            if count > limit:
                return None
            kind = value.WhichOneof("kind")
            if kind == "struct_value":
                stack.append(value.struct_value)
            elif kind == "list_value":
                stack.append(value.list_value)
    return count


def held_size(converted: object) -> int:
    """About how many bytes the tool inputs of a converted request hold: every object's own
    storage (a str takes 1, 2 or 4 bytes a character by its widest, whatever it cost on the
    wire; a `{}` 2 bytes there, 64 here). Attacker rounds 163 and 164: inputs of empty objects
    held 18 times their bytes, a text with one emoji 4 times."""
    if isinstance(converted, CallRequest):
        inputs: list[object] = [converted.tool_use.input]
    elif isinstance(converted, list):
        inputs = [call.tool_use.input for call in converted if isinstance(call, CallRequest)]
    elif isinstance(converted, ToolUse):
        inputs = [converted.input]
    else:
        return 0
    size = 0
    while inputs:
        value = inputs.pop()
        size += sys.getsizeof(value)
        if isinstance(value, dict):
            size += sum(sys.getsizeof(key) for key in value)
            inputs.extend(value.values())
        elif isinstance(value, list):
            inputs.extend(value)
    return size


def call_request_from_proto(message: pb.ExecuteRequest) -> CallRequest:
    """An ExecuteRequest as the pipeline's CallRequest."""
    if not message.HasField("tool_use"):
        raise RequestError("ExecuteRequest.tool_use is missing")
    scopes: dict[str, Literal["", "once", "session"]] = {
        "": "",
        "once": "once",
        "session": "session",
    }
    scope = scopes.get(message.approval_scope)
    if scope is None:
        raise RequestError('approval_scope must be "once", "session" or empty')
    return CallRequest(
        tool_use=tool_use_from_proto(message.tool_use),
        session_id=message.session_id,
        approval=ApprovalRequest(token=message.approval_token, scope=scope),
        turn_id=message.turn_id[:128],
    )


MAX_BATCH_CALLS = 100
"""tool_use blocks in one batch (an assistant turn has a handful): each is checked on the event
loop before any runs, so a batch of thousands would hold every other caller up."""


def batch_from_proto(message: pb.ExecuteBatchRequest) -> list[CallRequest]:
    """An ExecuteBatchRequest as CallRequests in order; ids must be unique within the batch."""
    if not message.tool_uses:
        raise RequestError("ExecuteBatchRequest.tool_uses is empty")
    if len(message.tool_uses) > MAX_BATCH_CALLS:
        raise RequestError(
            f"ExecuteBatchRequest.tool_uses holds {len(message.tool_uses)} tool_use blocks, more "
            f"than the {MAX_BATCH_CALLS} a batch may hold; split it into several batches"
        )
    room = MAX_REQUEST_VALUES  # counted before anything is converted
    for use in message.tool_uses:
        used = values_in(use.input, room)
        if used is None:
            raise RequestError(
                f"ExecuteBatchRequest: the batch's tool inputs hold more than "
                f"{MAX_REQUEST_VALUES} values together; send fewer tool_use blocks per batch, or "
                "their data as text"
            )
        room -= used
    requests = [
        CallRequest(
            tool_use=tool_use_from_proto(t, f"tool_uses[{i}]"), session_id=message.session_id
        )
        for i, t in enumerate(message.tool_uses)
    ]
    ids = [r.tool_use.id for r in requests]
    if len(set(ids)) != len(ids):
        raise RequestError("ExecuteBatchRequest.tool_uses has duplicate ids; each must be unique")
    return requests


@dataclasses.dataclass(frozen=True)
class TurnStart:
    """The session a streamed turn runs in (empty: the caller's default session)."""

    session_id: str


@dataclasses.dataclass(frozen=True)
class TurnEnd:
    """No more tool_use blocks in a streamed turn."""


TurnPart = TurnStart | ToolUse | TurnEnd
"""One TurnMessage of ExecuteTurn."""


def turn_part_from_proto(message: pb.TurnMessage) -> TurnPart:
    """A TurnMessage as the part of the turn it is."""
    kind = message.WhichOneof("kind")
    if kind == "start":
        return TurnStart(message.start.session_id)
    if kind == "end":
        return TurnEnd()
    if kind == "tool_use":
        return tool_use_from_proto(message.tool_use, "TurnMessage.tool_use")
    raise RequestError("a TurnMessage needs one of start, tool_use or end")


def _struct(value: dict[str, object]) -> struct_pb2.Struct:
    message = struct_pb2.Struct()
    json_format.ParseDict(value, message)
    return message


def _result_to_proto(result: ToolResult) -> pb.ToolResult:
    blocks = []
    for block in result.content:
        if isinstance(block, TextContent):
            blocks.append(pb.ContentBlock(text=pb.TextBlock(text=block.text)))
        elif isinstance(block, ImageContent):
            blocks.append(
                pb.ContentBlock(image=pb.ImageBlock(media_type=block.media_type, data=block.data))
            )
    return pb.ToolResult(tool_use_id=result.tool_use_id, content=blocks, is_error=result.is_error)


def _decision_to_proto(decision: Decision) -> pb.Decision:
    return pb.Decision(
        outcome=_OUTCOMES[decision.outcome],
        reasons=[wire_safe(reason) for reason in decision.reasons],
        decision_id=decision.decision_id,
        policy_revision=decision.policy_revision,
        approval_token=decision.approval_token,
    )


def _report_to_proto(report: ExecutionReport) -> pb.ExecutionReport:
    return pb.ExecutionReport(**report.model_dump())


def outcome_to_proto(outcome: ExecuteOutcome) -> pb.ExecuteResponse:
    """The pipeline's answer as an ExecuteResponse (with the exact Anthropic JSON beside it)."""
    return pb.ExecuteResponse(
        result=_result_to_proto(outcome.result),
        decision=_decision_to_proto(outcome.decision),
        report=_report_to_proto(outcome.report),
        tool_result_json=json.dumps(outcome.result.to_anthropic(), ensure_ascii=False),
        summary=wire_safe(outcome.summary),
        system_messages=[wire_safe(message) for message in outcome.system_messages],
    )


def event_to_proto(outcome: ExecuteOutcome) -> pb.ExecuteEvent:
    """The answer as the last event of an ExecuteStream."""
    return pb.ExecuteEvent(response=outcome_to_proto(outcome))


def batch_end_to_proto(notes: BatchNotes) -> pb.ExecuteEvent:
    """What PostToolBatch hooks said, as an ExecuteTurn's closing event."""
    return pb.ExecuteEvent(
        batch_end=pb.BatchEnd(
            additional_context=[wire_safe(text) for text in notes.additional_context],
            system_messages=[wire_safe(text) for text in notes.system_messages],
        )
    )


def progress_to_proto(tool_use_id: str, update: ProgressUpdate, dropped: int) -> pb.ExecuteEvent:
    """A progress update as a stream event."""
    return pb.ExecuteEvent(
        progress=pb.Progress(
            tool_use_id=tool_use_id,
            output=wire_safe(update.output),
            files_scanned=update.files_scanned,
            message=wire_safe(update.message),
            dropped_chunks=dropped,
        )
    )


def tools_to_proto(definitions: list[ToolDefinition]) -> pb.ListToolsResponse:
    """Tool definitions as protobuf and as an Anthropic `tools` JSON array."""
    tools = [
        pb.ToolDefinition(
            name=d.name,
            description=d.description,
            input_schema=_struct(d.input_schema),
            traits=pb.ToolTraits(
                read_only=d.traits.read_only,
                destructive=d.traits.destructive,
                concurrency_safe=d.traits.concurrency_safe,
                sandboxed=d.traits.sandboxed,
                max_result_chars=d.traits.max_result_chars,
            ),
            origin=pb.ToolOrigin(
                kind=d.origin.kind, server=d.origin.server, trusted=d.origin.trusted
            ),
            defer_loading=d.defer_loading,
            aliases=list(d.aliases),
        )
        for d in definitions
    ]
    tools_json = json.dumps(
        [d.to_anthropic(mark_deferred=True) for d in definitions], ensure_ascii=False
    )
    return pb.ListToolsResponse(tools=tools, tools_json=tools_json)


def session_to_proto(session: Session) -> pb.Session:
    """A session as the caller sees it."""
    return pb.Session(
        id=session.id,
        workspace=wire_safe(str(session.workspace)),
        idle_ttl_s=int(session.idle_ttl_s or 0),
        mode=session.mode,
    )


def closed_to_proto(closed: ClosedSession) -> pb.CloseSessionResponse:
    """What closing a session did."""
    return pb.CloseSessionResponse(
        cancelled_calls=closed.cancelled_calls, workspace_deleted=closed.workspace_deleted
    )


def reload_to_proto(result: ReloadResult) -> pb.ReloadPoliciesResponse:
    """The outcome of a policy reload."""
    return pb.ReloadPoliciesResponse(
        policy_revision=result.revision, reloaded=result.reloaded, error=result.error
    )


def status_to_proto(snapshot: StatusSnapshot, caller: Caller) -> pb.StatusResponse:
    """A health summary, with the principal the caller was identified as."""
    return pb.StatusResponse(
        version=snapshot.version,
        policy_revision=snapshot.policy_revision,
        opa_healthy=snapshot.opa_healthy,
        docker_healthy=snapshot.docker_healthy,
        pool_ready=snapshot.pool_ready,
        in_flight=snapshot.in_flight,
        sessions=snapshot.sessions,
        instance_id=snapshot.instance_id,
        principal=caller.principal,
    )


def grants_to_proto(session: Session) -> pb.ListGrantsResponse:
    """A session's grants."""
    return pb.ListGrantsResponse(
        grants=[
            pb.Grant(
                tool=g.tool,
                pattern=g.pattern,
                approved_by=g.approved_by,
                granted_at=int(g.granted_at),
            )
            for g in session.grants
        ]
    )


def pending_to_proto(ask: PendingAsk) -> pb.PendingApproval:
    """One ask as approvers see it."""
    # Every text the asker chose is escaped: an approver's terminal must not be told to move
    # the cursor or reorder what it shows.
    return pb.PendingApproval(
        approval_id=ask.approval_id,
        principal=printable(ask.principal),
        session_id=ask.session_id,
        tool_use_id=printable(ask.tool_use_id),
        tool=printable(ask.tool),
        input_json=ask.input_json,
        input_chars=ask.input_chars,
        reasons=[printable(r) for r in ask.reasons],
        asked_at=int(ask.asked_at),
        expires_at=int(ask.expires_at),
        state=ask.state.value,
        decided_by=printable(ask.decided_by),
        scope=ask.scope,
        note=printable(ask.note),
    )


def answer_scope(scope: str) -> Scope:
    """AnswerApprovalRequest.scope, checked."""
    if scope in ("", "once"):
        return "once"
    if scope == "session":
        return "session"
    raise RequestError('scope must be "once", "session" or empty')
