"""The built-in tool set, in the order ListTools shows it."""

from __future__ import annotations

from collections.abc import Iterable

from daemon.tools.builtin_readonly import READ_ONLY_TOOLS
from daemon.tools.builtin_sandboxed import SANDBOXED_TOOLS
from daemon.tools.contract import AnyTool
from daemon.tools.registry import ToolRegistry
from daemon.tools.tool_search import ToolSearchTool


def builtin_registry(deferred: Iterable[str] = ()) -> ToolRegistry:
    """A registry of every built-in tool; `deferred` ones are found through ToolSearch."""
    tools: list[AnyTool] = [cls() for cls in (*READ_ONLY_TOOLS, *SANDBOXED_TOOLS)]
    tools.append(ToolSearchTool())
    return ToolRegistry(tools, deferred)
