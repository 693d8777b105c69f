"""The registry: every implemented tool, by name. Implemented is not exposed: what a caller may see
is decided per call by the enabled flag and the policy (see daemon.pipeline)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from daemon.tools.contract import AnyTool, ToolTraits

_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


@dataclass(frozen=True)
class ToolDefinition:
    """What a caller sees of a tool."""

    name: str
    description: str
    input_schema: dict[str, Any]
    traits: ToolTraits

    def to_anthropic(self) -> dict[str, Any]:
        """An Anthropic Messages API tool definition."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
        }


def _strip_titles(schema: Any) -> Any:
    """pydantic adds a `title` to every property; it only costs the model tokens."""
    if isinstance(schema, dict):
        return {
            key: _strip_titles(value)
            for key, value in schema.items()
            if not (key == "title" and isinstance(value, str))
        }
    if isinstance(schema, list):
        return [_strip_titles(item) for item in schema]
    return schema


class ToolRegistry:
    """Tools by name; names are unique and valid Anthropic tool names."""

    def __init__(self, tools: Iterable[AnyTool]) -> None:
        self._tools: dict[str, AnyTool] = {}
        self._definitions: dict[str, ToolDefinition] = {}
        for tool in tools:
            if not _NAME.fullmatch(tool.name):
                raise ValueError(f"tool name {tool.name!r} is not a valid tool name")
            if tool.name in self._tools:
                raise ValueError(f"tool {tool.name!r} is registered twice")
            self._tools[tool.name] = tool
            schema = _strip_titles(tool.input_schema())
            schema.setdefault("type", "object")
            self._definitions[tool.name] = ToolDefinition(
                name=tool.name,
                description=tool.description,
                input_schema=schema,
                traits=tool.traits,
            )

    def get(self, name: str) -> AnyTool | None:
        """The enabled tool of that name, or None."""
        tool = self._tools.get(name)
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
