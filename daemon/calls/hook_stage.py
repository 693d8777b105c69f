"""The hooks' place in the call lifecycle: PreToolUse after validation (a rewritten input is
validated and analysed again), their decisions into the policy input, PostToolUse after the
call ran."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from daemon.errors import ToolError
from daemon.hooks.engine import HookEngine, PreHookOutcome
from daemon.hooks.protocol import HookCall
from daemon.models import ContentBlock, Outcome, TextContent
from daemon.policy.verdict import Verdict
from daemon.tools.call import ToolCall

NO_HOOKS = PreHookOutcome(None, (), None, (), ())


@dataclass(frozen=True)
class AfterPreHooks:
    """The call as the PreToolUse hooks left it."""

    call: ToolCall
    outcome: PreHookOutcome


@dataclass(frozen=True)
class AfterHooks:
    """A finished call as the PostToolUse hooks left it."""

    content: list[ContentBlock]
    """The tool's own output (or the notice that replaced it)."""
    is_error: bool
    notes: list[str]
    """The hooks' notes for the model, shown after the output."""
    records: list[dict[str, Any]]
    """Per-hook records for the audit line."""


def _hook_call(call: ToolCall) -> HookCall:
    return HookCall(
        session_id=call.session.id,
        workspace=call.session.workspace,
        tool_name=call.tool.name,
        tool_input=call.input_json,
        tool_use_id=call.tool_use_id,
        permission_mode=call.session.mode,
    )


class HookStage:
    """Runs the configured hooks around a call (a no-op without hooks)."""

    def __init__(self, engine: HookEngine | None) -> None:
        self._engine = engine

    async def before(self, call: ToolCall) -> AfterPreHooks:
        """Run PreToolUse hooks; raises ToolError when a rewritten input is not valid."""
        if self._engine is None or not self._engine.matching_pre(call.tool.name):
            return AfterPreHooks(call, NO_HOOKS)
        outcome = await self._engine.pre_tool_use(_hook_call(call))
        if outcome.updated_input is not None:
            call = call.with_input(outcome.updated_input)
        return AfterPreHooks(call, outcome)

    @staticmethod
    def enforce(verdict: Verdict, hooks: PreHookOutcome) -> Verdict:
        """A hook's deny holds whatever the policy said (the policy sees it too)."""
        if hooks.decision is Outcome.DENY and verdict.outcome is not Outcome.DENY:
            return Verdict.deny("; ".join(hooks.reasons) or "A PreToolUse hook denied the call.")
        return verdict

    async def after(
        self,
        call: ToolCall,
        hooks: PreHookOutcome,
        content: list[ContentBlock],
        is_error: bool,
    ) -> AfterHooks:
        """Run PostToolUse(Failure) hooks: the tool_result as the model should get it, and the
        hooks' notes, which go after it (the result budget keeps room for them)."""
        notes = list(hooks.additional_context)
        if self._engine is None:
            return AfterHooks(content, is_error, notes, hooks.to_audit())
        try:
            # Hooks run in the workspace: never in one moved or replaced under the session.
            call.session.verify_workspace()
        except ToolError as exc:
            return AfterHooks(content, True, [*notes, str(exc)], hooks.to_audit())
        post = await self._engine.post_tool_use(_hook_call(call), content, is_error)
        records = [*hooks.to_audit(), *post.to_audit()]
        if post.withheld:
            return AfterHooks([TextContent(text=post.withheld)], True, [], records)
        return AfterHooks(content, is_error, [*notes, *post.additional_context], records)
