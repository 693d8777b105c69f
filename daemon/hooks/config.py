"""How hooks are configured: one `[[hooks]]` table per hook in the daemon config.

The fields mirror Claude Code's hook settings (event, matcher, command, timeout) flattened into one
list, plus the two things a daemon needs on top: a name to report, and what a timeout or a crash
means (`on_error`).
"""

from __future__ import annotations

import re
from collections import Counter
from enum import StrEnum
from pathlib import PurePath
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, ValidationInfo, field_validator

from daemon.models import Frozen

__all__ = ["HookEvent", "HookList", "HookSpec", "name_hooks"]


class HookEvent(StrEnum):
    """When a hook runs (Claude Code's event names, so scripts can branch on them)."""

    PRE_TOOL_USE = "PreToolUse"
    """After validation, before the policy decides; may block, ask, allow or rewrite the input."""
    POST_TOOL_USE = "PostToolUse"
    """After a call that succeeded; may add text for the model."""
    POST_TOOL_USE_FAILURE = "PostToolUseFailure"
    """After a call whose tool_result is an error (or that was interrupted); may add text for
    the model."""
    PERMISSION_REQUEST = "PermissionRequest"
    """The policy asks for a person's approval: the hook may approve or deny in their stead
    (the policy still decides, seeing the hook as the approver)."""
    POST_TOOL_BATCH = "PostToolBatch"
    """After every call of a batch (a turn) answered; may add text for the model."""


_MATCH_ALL = ("", "*")


class HookSpec(Frozen):
    """One configured hook."""

    event: HookEvent
    """The event the hook runs on."""
    matcher: str = ""
    """Tool name, `A|B`, or a regular expression matched against the whole tool name
    (case-sensitive); empty or `*` matches every tool."""
    command: str | tuple[str, ...]
    """A shell command line (run by /bin/sh -c) or an argv list (run without a shell)."""
    name: str = ""
    """Shown in reasons, logs and the policy input; derived from the command when empty."""
    timeout_s: float = Field(default=60.0, gt=0, le=3_600)
    """The hook is killed (with everything it started) after this many seconds."""
    guard: bool = False
    """A PreToolUse hook the operator relies on to stop calls: any way it fails (a non-zero
    exit other than 2, a crash, a timeout, output that is not a valid answer) denies the call
    unless `on_error` says otherwise, so a guard that breaks on a crafted input cannot let that
    input through."""
    on_error: Literal["deny", "allow"] | None = None
    """What a failure means: deny the call, or carry on as if the hook had not run. Set, it
    applies to every failure of a PreToolUse hook (a non-zero exit other than 2 and unusable
    output included). Unset: deny every failure of a guard; for other hooks, as Claude Code
    does: a timeout or a crash denies a PreToolUse call (fail closed), a non-zero exit or
    unusable output is a non-blocking error, and the Post events never deny."""
    env: dict[str, str] = Field(default_factory=dict)
    """Extra environment variables (the hook otherwise gets only PATH, HOME, LANG and the
    workspace variables)."""
    redacts: bool = False
    """A PostToolUse hook that may replace the output (updatedToolOutput) to hide something:
    the calls it matches send no live output, so nothing reaches the caller before it ran, and
    any failure of it withholds the output (unless on_error = "allow"); its answer may be up
    to 16 MiB."""

    @field_validator("command")
    @classmethod
    def _check_command(cls, value: str | tuple[str, ...]) -> str | tuple[str, ...]:
        if isinstance(value, str):
            if not value.strip():
                raise ValueError("the command is empty; give a shell command line or an argv list")
        elif not value or not value[0]:
            raise ValueError("the argv list is empty; its first item is the program to run")
        return value

    @field_validator("matcher")
    @classmethod
    def _check_matcher(cls, value: str) -> str:
        if value.strip() in _MATCH_ALL:
            return value.strip()
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(
                f"matcher {value!r} is not a valid regular expression ({exc}); use a tool name, "
                "'A|B', a regular expression, or '*' for every tool"
            ) from None
        return value

    @field_validator("env")
    @classmethod
    def _check_env(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not key or "=" in key or "\0" in key:
                raise ValueError(f"environment variable name {key!r} is not valid")
        return value

    @field_validator("redacts")
    @classmethod
    def _check_redacts(cls, value: bool, info: ValidationInfo) -> bool:
        if value and info.data.get("event") is not HookEvent.POST_TOOL_USE:
            raise ValueError("redacts applies to PostToolUse hooks only")
        return value

    @property
    def fails_closed(self) -> bool:
        """A timeout or crash of this hook denies the call (withholds a redacted output)."""
        if self.on_error is not None:
            return self.on_error == "deny"
        return self.event is HookEvent.PRE_TOOL_USE or self.redacts

    @property
    def errors_deny(self) -> bool:
        """A non-zero exit other than 2, or unusable output, of this hook denies the call (a
        PreToolUse hook) or withholds the output (a redacting one), not just a timeout or a
        crash."""
        if self.redacts:
            return self.on_error != "allow"  # what it failed to redact must not go out
        if self.event is not HookEvent.PRE_TOOL_USE:
            return False
        if self.on_error is not None:
            return self.on_error == "deny"
        return self.guard

    def matches(self, tool_name: str) -> bool:
        """The hook applies to calls of `tool_name`."""
        if self.matcher in _MATCH_ALL:
            return True
        return re.fullmatch(self.matcher, tool_name) is not None

    def default_name(self) -> str:
        """The program's file name: what a reader of a log recognises."""
        if isinstance(self.command, str):
            first = self.command.split(maxsplit=1)[0]
        else:
            first = self.command[0]
        return PurePath(first.strip("'\"")).name or first


def name_hooks(hooks: tuple[HookSpec, ...]) -> tuple[HookSpec, ...]:
    """Give unnamed hooks a name from their command, and make every name unique.

    Explicit names must be unique (two hooks reported under one name would hide which one
    decided); derived names get `#2`, `#3` ... appended instead.
    """
    explicit = Counter(h.name for h in hooks if h.name)
    clashes = sorted(name for name, count in explicit.items() if count > 1)
    if clashes:
        raise ValueError(f"hook names must be unique; used more than once: {', '.join(clashes)}")
    taken = set(explicit)
    named: list[HookSpec] = []
    for hook in hooks:
        if hook.name:
            named.append(hook)
            continue
        base = hook.default_name()
        candidate, n = base, 1
        while candidate in taken:
            n += 1
            candidate = f"{base}#{n}"
        taken.add(candidate)
        named.append(hook.model_copy(update={"name": candidate}))
    return tuple(named)


HookList = Annotated[tuple[HookSpec, ...], AfterValidator(name_hooks)]
"""The `hooks` setting: a list of hooks, named and checked when the config loads."""
