"""The tools in force: the built-ins, then the operator's tools from the policy folder.

Built again from the folder at start and at every policy reload, all or nothing: a folder with a
bad definition is refused (ToolDefinitionError names the file, the field and why) and the tools
in force stay as they were.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from daemon.tools.builtin import builtin_tools
from daemon.tools.operator.definition import ToolDefinitionError, load_specs
from daemon.tools.operator.tool import operator_tool
from daemon.tools.registry import ToolRegistry


def tool_registry(policy_folder: Path, deferred: Iterable[str] = ()) -> ToolRegistry:
    """Every tool of this policy folder; `deferred` (configured) and the definitions that say
    so are found through ToolSearch. Raises ToolDefinitionError."""
    builtins = builtin_tools()
    taken = frozenset(name for tool in builtins for name in (tool.name, *tool.aliases))
    specs = load_specs(policy_folder, taken)
    tools = [*builtins, *(operator_tool(spec) for spec in specs)]
    try:
        return ToolRegistry(tools, {*deferred, *(s.name for s in specs if s.defer_loading)})
    except ValueError as exc:
        raise ToolDefinitionError(str(exc)) from exc
