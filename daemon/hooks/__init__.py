"""Operator hooks around every call, with Claude Code's protocol (see docs/hooks.md).

`HookEngine(settings.hooks)` runs them; `pre_tool_use` before the policy decides, `post_tool_use`
after the result is mapped. The module docstring of `daemon.hooks.engine` says how their answers
combine with the policy's decision.
"""

from daemon.hooks.config import HookEvent, HookList, HookSpec
from daemon.hooks.engine import HookEngine, PostHookOutcome, PreHookOutcome
from daemon.hooks.protocol import HookCall, HookResult

__all__ = [
    "HookCall",
    "HookEngine",
    "HookEvent",
    "HookList",
    "HookResult",
    "HookSpec",
    "PostHookOutcome",
    "PreHookOutcome",
]
