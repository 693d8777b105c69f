"""The registry: every implemented tool, by name and by alias. Implemented is not exposed: what a
caller may see is decided per call by the enabled flag and the policy (see daemon.calls.pipeline),
and a deferred tool is left out of ListTools until the model finds it with ToolSearch."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from daemon.tools.contract import AnyTool, ToolOrigin, ToolTraits
from daemon.tools.strict import strict_compatible

BUILTIN = ToolOrigin()
_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


@dataclass(frozen=True)
class ToolDefinition:
    """What a caller sees of a tool."""

    name: str
    description: str
    input_schema: dict[str, Any]
    traits: ToolTraits
    defer_loading: bool = False
    """Not shown up front; found through ToolSearch."""
    aliases: tuple[str, ...] = ()
    """Older names still accepted."""
    search_hint: str = ""
    """Extra keywords ToolSearch matches."""
    origin: ToolOrigin = BUILTIN
    """Where the tool comes from."""

    def to_anthropic(self, *, mark_deferred: bool = False) -> dict[str, Any]:
        """An Anthropic Messages API tool definition."""
        tool: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
        }
        if mark_deferred and self.defer_loading:
            tool["defer_loading"] = True
        if strict_compatible(self.input_schema):
            tool["strict"] = True  # the whole schema is in strict mode's subset
        return tool


class ToolRegistry:
    """Tools by name; names and aliases are unique and valid Anthropic tool names."""

    def __init__(self, tools: Iterable[AnyTool], deferred: Iterable[str] = ()) -> None:
        self._tools: dict[str, AnyTool] = {}
        self._aliases: dict[str, str] = {}
        self._definitions: dict[str, ToolDefinition] = {}
        deferred_names = set(deferred)
        for tool in tools:
            for name in (tool.name, *tool.aliases):
                if not _NAME.fullmatch(name):
                    raise ValueError(f"tool name {name!r} is not a valid tool name")
                if name in self._tools or name in self._aliases:
                    raise ValueError(f"tool name {name!r} is registered twice")
            self._tools[tool.name] = tool
            self._aliases.update({alias: tool.name for alias in tool.aliases})
            schema = tool.input_schema()
            self._definitions[tool.name] = ToolDefinition(
                name=tool.name,
                description=tool.description,
                input_schema=schema,
                traits=tool.traits,
                defer_loading=tool.name in deferred_names,
                aliases=tool.aliases,
                search_hint=tool.search_hint,
                origin=tool.origin,
            )
        unknown = deferred_names - set(self._tools)
        if unknown:
            raise ValueError(f"deferred tools that do not exist: {', '.join(sorted(unknown))}")

    def get(self, name: str) -> AnyTool | None:
        """The enabled tool of that name or alias, or None."""
        tool = self._tools.get(self._aliases.get(name, name))
        return tool if tool is not None and tool.enabled else None

    def enabled(self) -> list[AnyTool]:
        """Every enabled tool, in registration order."""
        return [tool for tool in self._tools.values() if tool.enabled]

    def definition(self, name: str) -> ToolDefinition:
        """The advertised definition of a registered tool."""
        return self._definitions[name]

    def names(self) -> list[str]:
        """Names of the enabled tools."""
        return [tool.name for tool in self.enabled()]
