"""The hooks engine: runs the hooks that match a call, in parallel, and combines what they said.

Where it sits in the pipeline (the pipeline does the wiring)::

    validate → PreToolUse hooks → policy (OPA) → execute → map → PostToolUse(Failure) hooks → budget

PreToolUse hooks see the validated input. Their combined outcome is not the final word:

- each hook's decision goes into the policy input as `input.hooks` (`PreHookOutcome.to_policy`);
- the final outcome combines the hooks' decision and the policy's: deny beats ask beats allow over
  {hooks, policy}. A hook's allow therefore never overrides a policy deny or ask. A hook's deny
  always holds (the pipeline enforces it even against a policy allow); a hook's ask needs a
  person's approval, which the shipped policy lets an approval token or a session grant give,
  never the permission mode (in dontAsk mode it is a deny);
- an `updatedInput` replaces the whole input; the pipeline validates it again (a rewrite is no way
  around the input model) and the policy decides on the rewritten input;
- `additionalContext` is text added to the tool_result for the model.

Among the hooks themselves deny beats ask beats allow beats silence. Two hooks that rewrite the
input differently are a configuration error, and the call is denied: picking either would run an
input the other hook never agreed to.

Post hooks run on PostToolUse when the tool_result is not an error, on PostToolUseFailure when it
is (or when the call was interrupted). They cannot undo the call; their text is added to the
result for the model. A PostToolUse hook may replace the output (to redact it); two hooks that
replace it differently withhold it, as does a post hook that times out or crashes while
configured to fail closed.

PermissionRequest hooks run when the policy asks for a person: a hook's deny denies the call, a
hook's allow approves it in the person's stead (the pipeline has the policy decide again, seeing
`approved_by: "hook:<name>"`), silence leaves the ask to a person. PostToolBatch hooks run once
every call of a batch answered; their text goes with the batch's last answer.

Every event's `systemMessage` goes to the caller beside the answer (never to the model).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from daemon.hooks.config import HookEvent, HookSpec, name_hooks
from daemon.hooks.protocol import (
    BatchCall,
    HookCall,
    HookResult,
    batch_input,
    hook_input,
    interpret,
)
from daemon.hooks.runner import run_hook
from daemon.models import ContentBlock, ImageContent, Outcome

__all__ = ["HookEngine", "PermissionOutcome", "PostHookOutcome", "PreHookOutcome"]

#: Strongest first: the combined decision is the first one any hook gave.
_PRECEDENCE = (Outcome.DENY, Outcome.ASK, Outcome.ALLOW)

#: The name under which the engine itself reports a decision (conflicting rewrites).
ENGINE_NAME = "tooljail-hooks"
#: Tools whose results are another tool's output: that tool's redacting hooks see them too.
OUTPUT_OF = {"BashOutput": ("Bash",)}


def system_messages(results: Sequence[HookResult]) -> tuple[str, ...]:
    """The hooks' messages for the user, each naming its hook."""
    return tuple(
        f"[{r.event.value} hook '{r.name}'] {r.system_message}" for r in results if r.system_message
    )


def _notes(results: Sequence[HookResult]) -> tuple[str, ...]:
    """Text for the model from the hooks, each note naming its hook."""
    notes: list[str] = []
    for result in results:
        if result.status == "blocked" and result.event is not HookEvent.PRE_TOOL_USE:
            notes.append(f"[{result.event.value} hook '{result.name}'] {result.reason}")
        if result.additional_context:
            notes.append(f"[{result.event.value} hook '{result.name}'] {result.additional_context}")
    return tuple(notes)


@dataclass(frozen=True)
class PreHookOutcome:
    """What the PreToolUse hooks said about one call, combined."""

    decision: Outcome | None
    """deny beats ask beats allow; None when no hook decided anything."""
    reasons: tuple[str, ...]
    """Why, naming the hooks that gave the combined decision (for the model and the user)."""
    updated_input: dict[str, Any] | None
    """The input to run with instead (to be validated again); None: unchanged."""
    additional_context: tuple[str, ...]
    """Notes for the model, to add to the tool_result."""
    results: tuple[HookResult, ...]
    """Each hook's result, in configuration order."""
    conflict: str = ""
    """Set when hooks rewrote the input differently (the decision is then deny)."""

    def to_policy(self) -> list[dict[str, str]]:
        """`input.hooks` for the policy: one entry per hook (plus one for a conflict)."""
        entries = [result.to_policy() for result in self.results]
        if self.conflict:
            entries.append({"name": ENGINE_NAME, "decision": "deny", "reason": self.conflict})
        return entries

    def to_audit(self) -> list[dict[str, Any]]:
        """Per-hook records for the audit line."""
        return [result.to_audit() for result in self.results]

    @property
    def system_messages(self) -> tuple[str, ...]:
        return system_messages(self.results)


@dataclass(frozen=True)
class PostHookOutcome:
    """What the post hooks said about one finished call, combined."""

    additional_context: tuple[str, ...]
    """Notes for the model (additionalContext, and the reasons of blocking answers)."""
    withheld: str
    """Non-empty when a failing fail-closed hook means the result must not reach the model."""
    results: tuple[HookResult, ...]
    """Each hook's result, in configuration order."""
    updated_output: tuple[ContentBlock, ...] | None = None
    """PostToolUse: what the model gets instead of the tool's output (None: the output)."""

    def to_audit(self) -> list[dict[str, Any]]:
        """Per-hook records for the audit line."""
        return [result.to_audit() for result in self.results]

    @property
    def system_messages(self) -> tuple[str, ...]:
        return system_messages(self.results)


@dataclass(frozen=True)
class PermissionOutcome:
    """What the PermissionRequest hooks said about an ask."""

    decision: Outcome | None
    """deny (any hook denied), allow (one allowed, none denied), or None: a person decides."""
    decided_by: str
    """The hook that decided, as the approval records it ("hook:<name>"); "" when none did."""
    reasons: tuple[str, ...]
    results: tuple[HookResult, ...]

    @property
    def system_messages(self) -> tuple[str, ...]:
        return system_messages(self.results)


def _combine_decision(results: Sequence[HookResult]) -> tuple[Outcome | None, tuple[str, ...]]:
    decided = {Outcome(r.decision) for r in results if r.decision != "none"}
    for outcome in _PRECEDENCE:
        if outcome in decided:
            reasons = tuple(
                r.describe() for r in results if r.decision == outcome.value and r.reason
            )
            return outcome, reasons
    return None, ()


def _combine_rewrites(results: Sequence[HookResult]) -> tuple[dict[str, Any] | None, str]:
    """The one rewritten input, or a conflict message when hooks disagree."""
    rewrites = [r for r in results if r.updated_input is not None]
    if not rewrites:
        return None, ""
    first = rewrites[0].updated_input
    if all(r.updated_input == first for r in rewrites[1:]):
        return first, ""
    names = ", ".join(f"'{r.name}'" for r in rewrites)
    return None, (
        f"The PreToolUse hooks {names} each rewrote the input differently, so the call is denied "
        "rather than run with an input some of them did not agree to. The operator must make "
        "the hooks agree (or make only one of them rewrite this tool's input)."
    )


def response_text(content: Sequence[ContentBlock]) -> str:
    """A result's content as hooks read it (images as a placeholder)."""
    parts = []
    for block in content:
        if isinstance(block, ImageContent):
            parts.append(f"[image: {block.media_type}, {len(block.data):,} bytes]")
        else:
            parts.append(block.text)
    return "\n".join(parts)


class HookEngine:
    """Runs the configured hooks for each call."""

    def __init__(self, hooks: Sequence[HookSpec] = ()) -> None:
        self._hooks = name_hooks(tuple(hooks))

    @property
    def hooks(self) -> tuple[HookSpec, ...]:
        """Every configured hook, named, in configuration order."""
        return self._hooks

    def redactors(self, tool_name: str) -> tuple[HookSpec, ...]:
        """The redacting PostToolUse hooks that see every result of this tool, errors included:
        those matching it, or the tool whose output it returns (BashOutput: Bash's)."""
        names = (tool_name, *OUTPUT_OF.get(tool_name, ()))
        return tuple(
            h
            for h in self._hooks
            if h.event is HookEvent.POST_TOOL_USE and h.redacts and any(map(h.matches, names))
        )

    def redacting(self, tool_name: str) -> bool:
        """Whether a redacting hook sees this tool's results (its calls then send no live
        output)."""
        return bool(self.redactors(tool_name))

    def matching_pre(self, tool_name: str) -> bool:
        """Whether any PreToolUse hook runs for this tool (skips the work when none does)."""
        return bool(self.matching(HookEvent.PRE_TOOL_USE, tool_name))

    def matching(self, event: HookEvent, tool_name: str) -> tuple[HookSpec, ...]:
        """The hooks that run for `event` on a call of `tool_name`."""
        return tuple(h for h in self._hooks if h.event is event and h.matches(tool_name))

    async def _run(
        self, event: HookEvent, hooks: Sequence[HookSpec], workspace: Path, stdin: bytes
    ) -> tuple[HookResult, ...]:
        async def one(spec: HookSpec) -> HookResult:
            return interpret(event, spec, await run_hook(spec, stdin, workspace))

        # A cancelled call cancels every hook; each kills its own process group on the way out.
        return tuple(await asyncio.gather(*(one(spec) for spec in hooks)))

    async def pre_tool_use(self, call: HookCall) -> PreHookOutcome:
        """Run the PreToolUse hooks matching the call and combine their answers."""
        event = HookEvent.PRE_TOOL_USE
        hooks = self.matching(event, call.tool_name)
        if not hooks:
            return PreHookOutcome(None, (), None, (), ())
        results = await self._run(event, hooks, call.workspace, hook_input(event, call))
        decision, reasons = _combine_decision(results)
        updated, conflict = _combine_rewrites(results)
        if conflict:
            decision, reasons = Outcome.DENY, (*reasons, conflict)
        if decision is Outcome.DENY:
            updated = None
        return PreHookOutcome(decision, reasons, updated, _notes(results), results, conflict)

    async def post_tool_use(
        self,
        call: HookCall,
        content: Sequence[ContentBlock],
        is_error: bool,
        *,
        interrupted: bool = False,
    ) -> PostHookOutcome:
        """Run the PostToolUse hooks (PostToolUseFailure when `is_error`) matching the call."""
        event = HookEvent.POST_TOOL_USE_FAILURE if is_error else HookEvent.POST_TOOL_USE
        hooks = self.matching(event, call.tool_name)
        # A redacting hook sees every result it could have to hide: errors, and the output of
        # the tool it names read through another (BashOutput).
        redactors = tuple(h for h in self.redactors(call.tool_name) if h not in hooks)
        if not hooks and not redactors:
            return PostHookOutcome((), "", ())
        text = response_text(content)
        stdin = hook_input(event, call, text, is_error, interrupted)
        post = HookEvent.POST_TOOL_USE
        ran = await asyncio.gather(
            self._run(event, hooks, call.workspace, stdin),
            self._run(post, redactors, call.workspace, hook_input(post, call, text, is_error)),
        )
        results = (*ran[0], *ran[1])
        withheld = "\n".join(r.describe() for r in results if r.decision == "deny")
        replaced = {r.updated_output for r in results if r.updated_output is not None}
        if len(replaced) > 1:
            names = ", ".join(f"'{r.name}'" for r in results if r.updated_output is not None)
            withheld = "\n".join(
                filter(
                    None,
                    (
                        withheld,
                        f"The PostToolUse hooks {names} each replaced the output differently, so "
                        "it is withheld rather than shown as only some of them left it. The "
                        "operator must make the hooks agree.",
                    ),
                )
            )
        updated = next(iter(replaced)) if len(replaced) == 1 else None
        return PostHookOutcome(_notes(results), withheld, results, updated)

    async def permission_request(
        self, call: HookCall, reasons: tuple[str, ...]
    ) -> PermissionOutcome | None:
        """Run the PermissionRequest hooks matching an asked call (None when none matches)."""
        event = HookEvent.PERMISSION_REQUEST
        hooks = self.matching(event, call.tool_name)
        if not hooks:
            return None
        stdin = hook_input(event, call, reasons=reasons)
        results = await self._run(event, hooks, call.workspace, stdin)
        decision, why = _combine_decision(results)
        if decision is Outcome.ASK:
            decision = None  # asking a person is what happens anyway
        decided_by = ""
        if decision is not None:
            decided_by = "hook:" + next(r.name for r in results if r.decision == decision.value)
        return PermissionOutcome(decision, decided_by, why, results)

    async def post_tool_batch(
        self, session_id: str, workspace: Path, mode: str, calls: list[BatchCall]
    ) -> PostHookOutcome | None:
        """Run the PostToolBatch hooks once a batch answered (None when there are none)."""
        event = HookEvent.POST_TOOL_BATCH
        hooks = tuple(h for h in self._hooks if h.event is event)
        if not hooks:
            return None
        stdin = batch_input(session_id, workspace, mode, calls)
        results = await self._run(event, hooks, workspace, stdin)
        return PostHookOutcome(_notes(results), "", results)
