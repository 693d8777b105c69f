"""The hooks' place in the call lifecycle: PreToolUse after validation (a rewritten input is
validated again), their decisions into the policy input, PostToolUse after execution."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from daemon.hooks.engine import HookEngine, PreHookOutcome
from daemon.hooks.protocol import HookCall
from daemon.models import ContentBlock, Outcome, TextContent
from daemon.policy.verdict import Verdict
from daemon.session import Session
from daemon.tools.contract import AnyTool, ToolInput, TouchedPath
from daemon.tools.validation import parse_input

NO_HOOKS = PreHookOutcome(None, (), None, (), ())


@dataclass(frozen=True)
class AfterPreHooks:
    """The call as the PreToolUse hooks left it."""

    args: ToolInput
    paths: list[TouchedPath]
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


class HookStage:
    """Runs the configured hooks around a call (a no-op without hooks)."""

    def __init__(self, engine: HookEngine | None) -> None:
        self._engine = engine

    @staticmethod
    def _call(tool: AnyTool, args: ToolInput, session: Session, tool_use_id: str) -> HookCall:
        return HookCall(
            session_id=session.id,
            workspace=session.workspace,
            tool_name=tool.name,
            tool_input=args.model_dump(mode="json", by_alias=True),
            tool_use_id=tool_use_id,
            permission_mode=session.mode,
        )

    async def before(
        self,
        tool: AnyTool,
        args: ToolInput,
        paths: list[TouchedPath],
        session: Session,
        tool_use_id: str,
    ) -> AfterPreHooks:
        """Run PreToolUse hooks; raises ToolError when a rewritten input is not valid."""
        if self._engine is None or not self._engine.matching_pre(tool.name):
            return AfterPreHooks(args, paths, NO_HOOKS)
        outcome = await self._engine.pre_tool_use(self._call(tool, args, session, tool_use_id))
        if outcome.updated_input is not None:
            args = tool.validate(parse_input(tool, outcome.updated_input), session)
            paths = tool.touched_paths(args, session)
        return AfterPreHooks(args, paths, outcome)

    @staticmethod
    def enforce(verdict: Verdict, hooks: PreHookOutcome) -> Verdict:
        """A hook's deny holds whatever the policy said (the policy sees it too)."""
        if hooks.decision is Outcome.DENY and verdict.outcome is not Outcome.DENY:
            return Verdict.deny("; ".join(hooks.reasons) or "A PreToolUse hook denied the call.")
        return verdict

    async def after(
        self,
        tool: AnyTool,
        args: ToolInput,
        session: Session,
        tool_use_id: str,
        hooks: PreHookOutcome,
        content: list[ContentBlock],
        is_error: bool,
    ) -> AfterHooks:
        """Run PostToolUse(Failure) hooks: the tool_result as the model should get it, and the
        hooks' notes, which go after it (the result budget keeps room for them)."""
        notes = list(hooks.additional_context)
        if self._engine is None:
            return AfterHooks(content, is_error, notes, hooks.to_audit())
        call = self._call(tool, args, session, tool_use_id)
        post = await self._engine.post_tool_use(call, content, is_error)
        records = [*hooks.to_audit(), *post.to_audit()]
        if post.withheld:
            return AfterHooks([TextContent(text=post.withheld)], True, [], records)
        return AfterHooks(content, is_error, [*notes, *post.additional_context], records)
