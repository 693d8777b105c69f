"""The built-in tool set, in the order ListTools shows it."""

from __future__ import annotations

from daemon.tools.builtin_readonly import READ_ONLY_TOOLS
from daemon.tools.builtin_sandboxed import SANDBOXED_TOOLS
from daemon.tools.contract import AnyTool
from daemon.tools.registry import ToolRegistry


def builtin_registry() -> ToolRegistry:
    """A registry of every built-in tool."""
    tools: list[AnyTool] = [cls() for cls in (*READ_ONLY_TOOLS, *SANDBOXED_TOOLS)]
    return ToolRegistry(tools)
