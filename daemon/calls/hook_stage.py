"""The hooks' place in the call lifecycle: PreToolUse after validation (a rewritten input is
validated and analysed again), their decisions into the policy input, PermissionRequest when the
policy asks, PostToolUse after the call ran (PostToolUseFailure also after an interrupted one)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from daemon.errors import ToolError
from daemon.hooks.config import HookEvent
from daemon.hooks.engine import HookEngine, PermissionOutcome, PreHookOutcome
from daemon.hooks.protocol import HookCall
from daemon.host.threads import FILESYSTEM_THREADS
from daemon.models import ContentBlock, Outcome, TextContent
from daemon.policy.verdict import Verdict
from daemon.tools.call import ToolCall

NO_HOOKS = PreHookOutcome(None, (), None, (), ())
INTERRUPTED_MAX = 16
"""Interrupted calls whose hooks may run at once (more are skipped, and audited as such)."""
INTERRUPTED_PER_OWNER = 4
"""Of those, one principal's."""
_INTERRUPTED: dict[asyncio.Task[None], str] = {}
"""Hooks of interrupted calls still running, with their principal (held so they are not
collected)."""


def _forget(task: asyncio.Task[None]) -> None:
    _INTERRUPTED.pop(task, None)


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
    """The post hooks' records for the audit line."""
    system_messages: tuple[str, ...] = ()
    """The post hooks' messages for the user."""


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
            # Checked and analysed again, which may block (a long Bash line's parse, a path
            # on a filesystem that hangs).
            rewritten = outcome.updated_input
            call = await FILESYSTEM_THREADS.run(
                call.session.owner, functools.partial(call.with_input, rewritten)
            )
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
        messages: tuple[str, ...] = ()
        if self._engine is None:
            return AfterHooks(content, is_error, notes, [], messages)
        try:
            # Hooks get the workspace's path: never one moved or replaced under the session.
            await call.session.verify_workspace()
        except ToolError:
            moved = (
                "The session's workspace was moved or replaced while this call ran, so no "
                "PostToolUse hook ran on its result."
            )
            if self._engine.redacting(call.tool.name):
                withheld = f"{moved} Its output is withheld: a redacting hook had to see it first."
                return AfterHooks([TextContent(text=withheld)], True, [], [])
            return AfterHooks(content, True, [*notes, moved], [], messages)
        post = await self._engine.post_tool_use(_hook_call(call), content, is_error)
        records = post.to_audit()
        messages = (*messages, *post.system_messages)
        if post.withheld:
            return AfterHooks([TextContent(text=post.withheld)], True, [], records, messages)
        if post.updated_output is not None:
            content = list(post.updated_output)
        notes = [*notes, *post.additional_context]
        return AfterHooks(content, is_error, notes, records, messages)

    def redacting(self, call: ToolCall) -> bool:
        """Whether a redacting PostToolUse hook will see this call's output first."""
        return self._engine is not None and self._engine.redacting(call.tool.name)

    async def permission(
        self, call: ToolCall, reasons: tuple[str, ...]
    ) -> PermissionOutcome | None:
        """Run the PermissionRequest hooks of an asked call (None: no hook for it)."""
        if self._engine is None:
            return None
        return await self._engine.permission_request(_hook_call(call), reasons)

    def interrupted(self, call: ToolCall, on_done: Callable[[list[dict[str, Any]]], None]) -> None:
        """Run the PostToolUseFailure hooks of a call that was interrupted (is_interrupt), in
        the background: the cancellation goes on at once; `on_done` gets their records."""
        engine = self._engine
        if engine is None or not engine.matching(HookEvent.POST_TOOL_USE_FAILURE, call.tool.name):
            return
        owner = call.session.owner
        running = [task for task, who in _INTERRUPTED.items() if not task.done()]
        if len(running) >= INTERRUPTED_MAX or (
            sum(1 for task in running if _INTERRUPTED[task] == owner) >= INTERRUPTED_PER_OWNER
        ):
            # Cancelling calls costs the caller nothing; hook processes cost the host.
            on_done([{"skipped": "too many hooks of interrupted calls were running"}])
            return

        async def run() -> None:
            try:
                await call.session.verify_workspace()
            except ToolError:
                on_done([{"skipped": "the session's workspace was moved or replaced"}])
                return
            text = f"The {call.tool.name} call was interrupted before it finished."
            post = await engine.post_tool_use(
                _hook_call(call), [TextContent(text=text)], True, interrupted=True
            )
            on_done(post.to_audit())

        task = asyncio.create_task(run(), name="hooks-after-interrupt")
        _INTERRUPTED[task] = owner
        task.add_done_callback(_forget)
