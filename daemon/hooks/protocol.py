"""Claude Code's hook protocol: the JSON a hook reads on stdin, and what its exit status and stdout
mean. Existing Claude Code hook scripts work unchanged because both directions follow it:

- exit 0: success; stdout may hold one JSON object (anything else on stdout is ignored);
- exit 2: block; stderr is the reason (PreToolUse: the call is denied; Post events: the text goes
  to the model, the call has already run);
- any other exit status, or a JSON object that does not follow the protocol: a non-blocking error,
  logged; the hook counts as having said nothing;
- a timeout, a signal, or a command that cannot be run at all: a fault, handled by `on_error`.

Both JSON shapes Claude Code has used are read: `hookSpecificOutput.permissionDecision` /
`permissionDecisionReason` / `updatedInput` / `additionalContext` (current), the same keys at the
top level (flat), and the legacy top-level `decision` (`approve` / `block`) with `reason`.
PostToolUse may replace the output (`updatedToolOutput`, or `updatedMCPToolOutput`: a string or a
list of content blocks); PermissionRequest answers with `hookSpecificOutput.decision.behavior`
(`allow` / `deny`, with a `message`); every event may carry a `systemMessage` for the user.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from daemon.hooks.config import HookEvent, HookSpec
from daemon.hooks.runner import HookProcess
from daemon.models import ContentBlock, Frozen, ImageContent, TextContent

__all__ = [
    "BatchCall",
    "HookCall",
    "HookDecision",
    "HookResult",
    "HookStatus",
    "batch_input",
    "hook_input",
    "interpret",
]

log = logging.getLogger(__name__)

HookDecision = Literal["allow", "deny", "ask", "none"]
HookStatus = Literal["ok", "blocked", "error", "timeout", "crashed"]

#: Longest reason or context text kept from one hook (it ends up in front of the model).
MAX_TEXT_CHARS = 10_000

_LEGACY_DECISIONS: dict[str, HookDecision] = {
    "approve": "allow",
    "allow": "allow",
    "block": "deny",
    "deny": "deny",
    "ask": "ask",
}
_DECISIONS: tuple[HookDecision, ...] = ("allow", "deny", "ask")


@dataclass(frozen=True)
class HookCall:
    """The call the hooks are about."""

    session_id: str
    workspace: Path
    """The session's workspace: the hooks' working directory and `cwd` in their input."""
    tool_name: str
    tool_input: dict[str, Any]
    """The validated input, as JSON (what the tool will run with, unless a hook rewrites it)."""
    tool_use_id: str
    permission_mode: str = "default"
    """The session's permission mode (Claude Code sends it too)."""


class HookResult(Frozen):
    """What one hook said, for the decision, the audit log and the policy input."""

    name: str
    event: HookEvent
    status: HookStatus
    """ok (exit 0), blocked (exit 2 or a blocking JSON answer), error (non-blocking failure),
    timeout, crashed (signal or could not run)."""
    decision: HookDecision = "none"
    """PreToolUse: the hook's permission decision. Post events: deny only when a failing hook
    is configured to fail closed (the result is then withheld)."""
    reason: str = ""
    """The hook's own words (stderr on exit 2, or the JSON reason), or what went wrong."""
    updated_input: dict[str, Any] | None = None
    """PreToolUse: the input the hook wants the call to run with instead."""
    additional_context: str = ""
    """Text for the model, added to the tool_result."""
    system_message: str = ""
    """A message the hook meant for the user, not the model (sent to the caller beside the
    result, and kept for the audit log)."""
    updated_output: tuple[ContentBlock, ...] | None = None
    """PostToolUse: the content the model gets instead of the tool's own."""
    exit_code: int | None = None
    duration_ms: int = 0
    output_truncated: bool = False
    """stdout or stderr went past the capture cap."""

    @property
    def failed(self) -> bool:
        """Timed out or crashed: `on_error` decided what it means."""
        return self.status in ("timeout", "crashed")

    def describe(self) -> str:
        """The reason as the model and the user read it, naming the hook."""
        if self.failed and self.decision == "deny":
            consequence = (
                "so the call is denied"
                if self.event is HookEvent.PRE_TOOL_USE
                else "so the call's result is withheld (the call itself did run)"
            )
            return (
                f"The {self.event.value} hook '{self.name}' {self.reason}; it is configured to "
                f"fail closed, {consequence}. The operator must fix the hook before calls like "
                "this can go through."
            )
        return f"Hook '{self.name}': {self.reason}"

    def to_policy(self) -> dict[str, str]:
        """As `input.hooks[]` shows it to the policy."""
        return {"name": self.name, "decision": self.decision, "reason": self.reason}

    def to_audit(self) -> dict[str, Any]:
        """For the audit line: what happened, without the rewritten input's values."""
        return {
            "name": self.name,
            "event": self.event.value,
            "status": self.status,
            "decision": self.decision,
            "reason": self.reason,
            "rewrote_input": self.updated_input is not None,
            "replaced_output": self.updated_output is not None,
            "added_context": bool(self.additional_context),
            "system_message": self.system_message,
            "exit_code": self.exit_code,
            "duration_ms": self.duration_ms,
            "output_truncated": self.output_truncated,
        }


def hook_input(
    event: HookEvent,
    call: HookCall,
    response_text: str = "",
    is_error: bool = False,
    interrupted: bool = False,
    *,
    reasons: tuple[str, ...] = (),
) -> bytes:
    """The JSON document a hook reads on stdin (PermissionRequest: with the policy's reasons
    for asking)."""
    document: dict[str, Any] = {
        "hook_event_name": event.value,
        "session_id": call.session_id,
        "cwd": str(call.workspace),
        "permission_mode": call.permission_mode,
        "tool_name": call.tool_name,
        "tool_input": call.tool_input,
        "tool_use_id": call.tool_use_id,
    }
    if event is HookEvent.PERMISSION_REQUEST:
        document["permission_suggestions"] = []
        document["reasons"] = list(reasons)
    elif event is not HookEvent.PRE_TOOL_USE:
        document["tool_response"] = {"content": response_text, "is_error": is_error}
    if event is HookEvent.POST_TOOL_USE_FAILURE:
        document["error"] = response_text
        document["is_interrupt"] = interrupted
    return json.dumps(document, ensure_ascii=False).encode("utf-8")


@dataclass(frozen=True)
class BatchCall:
    """One answered call of a batch, as PostToolBatch hooks read it."""

    tool_name: str
    tool_input: dict[str, Any]
    tool_use_id: str
    response_text: str
    is_error: bool


def batch_input(
    session_id: str, workspace: Path, permission_mode: str, calls: list[BatchCall]
) -> bytes:
    """The JSON document a PostToolBatch hook reads on stdin."""
    document = {
        "hook_event_name": HookEvent.POST_TOOL_BATCH.value,
        "session_id": session_id,
        "cwd": str(workspace),
        "permission_mode": permission_mode,
        "tool_calls": [
            {
                "tool_name": call.tool_name,
                "tool_input": call.tool_input,
                "tool_use_id": call.tool_use_id,
                "tool_response": {"content": call.response_text, "is_error": call.is_error},
            }
            for call in calls
        ],
    }
    return json.dumps(document, ensure_ascii=False).encode("utf-8")


def _clip(text: str) -> str:
    text = text.strip()
    if len(text) <= MAX_TEXT_CHARS:
        return text
    return text[:MAX_TEXT_CHARS] + f" … [{len(text) - MAX_TEXT_CHARS:,} more characters cut]"


class _BadOutput(ValueError):
    """The hook's JSON answer does not follow the protocol."""


def _text_field(data: dict[str, Any], key: str) -> str:
    value = data.get(key, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _BadOutput(f"{key} must be a string, got {type(value).__name__}")
    return _clip(value)


def _parse_answer(event: HookEvent, data: dict[str, Any]) -> dict[str, Any]:
    """The fields of a HookResult a JSON answer sets. All or nothing: a malformed answer is
    never half applied."""
    specific = data.get("hookSpecificOutput") or {}
    if not isinstance(specific, dict):
        raise _BadOutput("hookSpecificOutput must be an object")
    named = specific.get("hookEventName", event.value)
    if named != event.value:
        raise _BadOutput(f"hookSpecificOutput.hookEventName is {named!r}, expected {event.value!r}")
    # The current shape wins over the flat one, which wins over the legacy fields.
    merged = {**data, **specific}
    decision: HookDecision = "none"
    reason = ""
    status: HookStatus = "ok"

    raw = merged.get("permissionDecision")
    if event is HookEvent.PERMISSION_REQUEST:
        decision, reason = _permission_request_decision(specific)
    elif raw is not None:
        if raw not in _DECISIONS:
            raise _BadOutput(f"permissionDecision must be allow, deny or ask, got {raw!r}")
        decision, reason = raw, _text_field(merged, "permissionDecisionReason")
    elif data.get("decision") is not None:
        legacy = data["decision"]
        if legacy not in _LEGACY_DECISIONS:
            raise _BadOutput(f"decision must be approve or block, got {legacy!r}")
        decision, reason = _LEGACY_DECISIONS[legacy], _text_field(data, "reason")
    if event not in (HookEvent.PRE_TOOL_USE, HookEvent.PERMISSION_REQUEST):
        # After the call, "block" can only mean: tell the model. Nothing is left to decide.
        if decision == "deny":
            status = "blocked"
        decision = "none"

    keep_going = data.get("continue", True)
    if not isinstance(keep_going, bool):
        raise _BadOutput("continue must be true or false")
    if not keep_going:
        # Claude Code would stop the whole agent; a daemon can only refuse or report this call.
        reason = _text_field(data, "stopReason") or reason or "the hook asked to stop"
        status = "blocked"
        decision = "deny" if event in _DECIDING else "none"
    if decision == "deny":
        status = "blocked"
        reason = reason or "the hook denied the call without giving a reason"
    elif decision == "ask":
        reason = reason or "the hook wants a human to approve this call"

    updated = merged.get("updatedInput")
    if updated is not None:
        if event is not HookEvent.PRE_TOOL_USE:
            raise _BadOutput("updatedInput is only honoured by PreToolUse hooks")
        if not isinstance(updated, dict):
            raise _BadOutput("updatedInput must be an object (the complete new tool input)")
    return {
        "status": status,
        "decision": decision,
        "reason": reason,
        "updated_input": updated,
        "updated_output": _updated_output(event, merged),
        "additional_context": _text_field(merged, "additionalContext"),
        "system_message": _text_field(data, "systemMessage"),
    }


_DECIDING = (HookEvent.PRE_TOOL_USE, HookEvent.PERMISSION_REQUEST)
IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
_OUTPUT_KEYS = ("updatedToolOutput", "updatedMCPToolOutput")


def _permission_request_decision(specific: dict[str, Any]) -> tuple[HookDecision, str]:
    """A PermissionRequest answer: hookSpecificOutput.decision.behavior allow or deny."""
    answer = specific.get("decision")
    if answer is None:
        return "none", ""
    if not isinstance(answer, dict) or answer.get("behavior") not in ("allow", "deny"):
        raise _BadOutput("hookSpecificOutput.decision must be {behavior: allow or deny, ...}")
    if answer.get("updatedInput") is not None:
        raise _BadOutput(
            "decision.updatedInput is not honoured here: the approval is for the input as asked "
            "(rewrite inputs in a PreToolUse hook)"
        )
    behavior: HookDecision = answer["behavior"]
    return behavior, _text_field(answer, "message")


def _updated_output(event: HookEvent, merged: dict[str, Any]) -> tuple[ContentBlock, ...] | None:
    """PostToolUse's replacement output: a string, a list of content blocks, or an MCP result
    ({"content": [...]})."""
    given = [key for key in _OUTPUT_KEYS if merged.get(key) is not None]
    if not given:
        return None
    if event is not HookEvent.POST_TOOL_USE:
        raise _BadOutput(f"{given[0]} is only honoured by PostToolUse hooks")
    value = merged[given[0]]
    if isinstance(value, str):
        return (TextContent(text=value),)
    if isinstance(value, dict) and "content" in value:
        value = value["content"]  # an MCP tools/call result
    if not isinstance(value, list):
        raise _BadOutput(f"{given[0]} must be a string or a list of text/image content blocks")
    return tuple(_content_block(given[0], index, item) for index, item in enumerate(value))


def _content_block(key: str, index: int, item: Any) -> ContentBlock:
    """One replacement block: {"type": "text", "text"}, or an image in the Messages API shape
    ({"type": "image", "source": {"type": "base64", "media_type", "data"}}) or MCP's
    ({"type": "image", "data", "mimeType"})."""
    where = f"{key}[{index}]"
    if not isinstance(item, dict):
        raise _BadOutput(f"{where} must be an object")
    if item.get("type") == "text" and isinstance(item.get("text"), str):
        return TextContent(text=item["text"])
    if item.get("type") == "image":
        nested = item.get("source")
        source: dict[str, Any] = nested if isinstance(nested, dict) else item
        media_type = source.get("media_type", source.get("mimeType"))
        data = source.get("data")
        if media_type in IMAGE_TYPES and isinstance(data, str):
            try:
                return ImageContent(
                    media_type=media_type, data=base64.b64decode(data, validate=True)
                )
            except (binascii.Error, ValueError):
                raise _BadOutput(f"{where}: the image data is not valid base64") from None
        raise _BadOutput(f"{where}: an image needs base64 data and a media type of {IMAGE_TYPES}")
    raise _BadOutput(f"{where} must be a text block (type, text) or an image block")


def _read_stdout(event: HookEvent, proc: HookProcess) -> dict[str, Any]:
    text = proc.stdout.strip()
    if not text.startswith("{"):
        # Plain text on stdout is the hook's log output; Claude Code does not act on it either.
        return {"status": "ok"}
    if proc.stdout_truncated:
        raise _BadOutput(f"its JSON answer is longer than {proc.cap // 1024} KiB and was not read")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _BadOutput(f"stdout is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise _BadOutput("stdout must hold one JSON object and nothing else")
    return _parse_answer(event, data)


def _fault(spec: HookSpec, proc: HookProcess) -> str:
    """Why a hook failed, or "" when it ran to an exit status."""
    if proc.timed_out:
        return f"did not finish within {spec.timeout_s:g} s and was killed"
    if proc.start_error:
        return f"could not run ({proc.start_error})"
    if proc.exit_code is not None and proc.exit_code < 0:
        return f"crashed (killed by signal {-proc.exit_code})"
    return ""


def _refuses(event: HookEvent) -> str:
    if event is HookEvent.POST_TOOL_USE:
        return "withholds the output (a redacting hook, or on_error)"
    return "denies the call (on_error)"


def interpret(event: HookEvent, spec: HookSpec, proc: HookProcess) -> HookResult:
    """Turn what a hook process did into its result; logs every non-blocking error."""
    common: dict[str, Any] = {
        "name": spec.name,
        "event": event,
        "exit_code": proc.exit_code,
        "duration_ms": proc.duration_ms,
        "output_truncated": proc.stdout_truncated or proc.stderr_truncated,
    }
    fault = _fault(spec, proc)
    if fault:
        log.warning("%s hook %r %s", event.value, spec.name, fault)
        status: HookStatus = "timeout" if proc.timed_out else "crashed"
        decision: HookDecision = "deny" if spec.fails_closed else "none"
        return HookResult(status=status, decision=decision, reason=fault, **common)
    if proc.exit_code == 2:
        reason = _clip(proc.stderr) or "the hook blocked the call (exit 2) without a reason"
        decision = "deny" if event in _DECIDING else "none"
        return HookResult(status="blocked", decision=decision, reason=reason, **common)
    if proc.exit_code != 0:
        first_line = next(iter(proc.stderr.strip().splitlines()), "")
        log.warning(
            "%s hook %r exited with status %s (non-blocking): %s",
            event.value,
            spec.name,
            proc.exit_code,
            first_line,
        )
        if spec.errors_deny:
            reason = f"exited with status {proc.exit_code}, which {_refuses(event)}"
            if first_line:
                reason += f": {_clip(first_line)}"
            return HookResult(status="error", decision="deny", reason=reason, **common)
        reason = f"exited with status {proc.exit_code} (non-blocking error)"
        return HookResult(status="error", reason=reason, **common)
    try:
        answer = _read_stdout(event, proc)
    except _BadOutput as exc:
        log.warning("%s hook %r gave an unusable answer: %s", event.value, spec.name, exc)
        if spec.errors_deny:
            reason = f"unusable output, which {_refuses(event)}: {exc}"
            return HookResult(status="error", decision="deny", reason=reason, **common)
        return HookResult(status="error", reason=f"unusable output: {exc}", **common)
    return HookResult(**common, **answer)
