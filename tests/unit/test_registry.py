"""The registry: names, aliases and deferred tools."""

from __future__ import annotations

from typing import ClassVar

import pytest

from daemon.tools.contract import CallContext, Tool, ToolInput, ToolOutput
from daemon.tools.registry import ToolRegistry


class NoInput(ToolInput):
    pass


class Renamed(Tool[NoInput, str]):
    name: ClassVar[str] = "NewName"
    aliases: ClassVar[tuple[str, ...]] = ("OldName",)
    description: ClassVar[str] = "A tool that was renamed."
    input_model = NoInput

    async def call(self, args: NoInput, ctx: CallContext) -> str:
        return "ran"

    def render(self, result: str) -> ToolOutput:
        return ToolOutput.text(result)


class Clash(Renamed):
    name: ClassVar[str] = "OldName"
    aliases: ClassVar[tuple[str, ...]] = ()


def test_an_alias_finds_the_tool_and_is_advertised() -> None:
    registry = ToolRegistry([Renamed()])
    assert registry.get("OldName") is registry.get("NewName")
    assert registry.definition("NewName").aliases == ("OldName",)
    assert registry.names() == ["NewName"]


def test_an_alias_may_not_shadow_another_tool() -> None:
    with pytest.raises(ValueError, match="registered twice"):
        ToolRegistry([Renamed(), Clash()])


def test_deferred_tools_must_exist_and_are_marked() -> None:
    registry = ToolRegistry([Renamed()], deferred=["NewName"])
    definition = registry.definition("NewName")
    assert definition.defer_loading
    assert definition.to_anthropic(mark_deferred=True)["defer_loading"] is True
    assert "defer_loading" not in definition.to_anthropic()
    with pytest.raises(ValueError, match="do not exist"):
        ToolRegistry([Renamed()], deferred=["Missing"])


def test_schemas_lose_pydantic_titles() -> None:
    schema = ToolRegistry([Renamed()]).definition("NewName").input_schema
    assert "title" not in schema and schema["type"] == "object"
