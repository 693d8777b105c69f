"""ToolSearch: finds tools that are not shown up front (deferred) and returns their definitions."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import ClassVar

from pydantic import Field

from daemon.errors import ToolError
from daemon.tools.contract import (
    CallContext,
    InterruptBehavior,
    Tool,
    ToolInput,
    ToolOutput,
    ToolTraits,
)
from daemon.tools.registry import ToolDefinition

_WORD = re.compile(r"[a-z0-9]+")


class ToolSearchInput(ToolInput):
    query: str = Field(
        min_length=1,
        max_length=500,
        description="Keywords describing the capability you need, e.g. 'edit several places in "
        "one file' or a tool name.",
    )
    max_results: int = Field(
        default=5, ge=1, le=20, description="How many tool definitions to return (1-20)."
    )


@dataclass(frozen=True)
class SearchResult:
    query: str
    found: list[ToolDefinition]


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def score(definition: ToolDefinition, query: str) -> float:
    """How well a tool matches the query: name hits weigh most, then hints, then description."""
    wanted = _words(query)
    if not wanted:
        return 0.0
    names = _words(" ".join((definition.name, *definition.aliases)))
    hints = _words(definition.search_hint)
    description = _words(definition.description)
    exact = 10.0 if query.strip().lower() == definition.name.lower() else 0.0
    return exact + sum(
        3.0 * (word in names) + 2.0 * (word in hints) + 1.0 * (word in description)
        for word in wanted
    )


class ToolSearchTool(Tool[ToolSearchInput, SearchResult]):
    """Finds deferred tools by keyword."""

    name: ClassVar[str] = "ToolSearch"
    description: ClassVar[str] = (
        "Search the tools that are available but not listed up front, by keywords, and get their "
        "full definitions (name, description, input schema) so you can call them. Use it when no "
        "listed tool fits the task. Returns at most max_results tools, best match first; "
        "'No matching tools' when nothing matches."
    )
    input_model = ToolSearchInput
    search_hint: ClassVar[str] = "find discover tools deferred capabilities"
    traits: ClassVar[ToolTraits] = ToolTraits(
        read_only=True,
        destructive=False,
        concurrency_safe=True,
        sandboxed=False,
        interrupt=InterruptBehavior.CANCEL,
        max_result_chars=50_000,
    )

    async def call(self, args: ToolSearchInput, ctx: CallContext) -> SearchResult:
        if ctx.catalog is None:
            raise ToolError("The tool catalog is not available for this call.")
        candidates = [d for d in await ctx.catalog() if d.name != self.name]
        ranked = sorted(
            ((score(d, args.query), i, d) for i, d in enumerate(candidates)),
            key=lambda item: (-item[0], item[1]),
        )
        found = [d for points, _, d in ranked if points > 0][: args.max_results]
        # Found once, listed from then on (as the reference runtime loads discovered tools).
        ctx.session.discovered.update(d.name for d in found if d.defer_loading)
        return SearchResult(query=args.query, found=found)

    def render(self, result: SearchResult) -> ToolOutput:
        if not result.found:
            return ToolOutput.text(
                f"No matching tools for {result.query!r}. Try other keywords, or use a listed tool."
            )
        definitions = [d.to_anthropic() for d in result.found]
        return ToolOutput.text(json.dumps(definitions, indent=1, ensure_ascii=False))

    def summarize(
        self, args: ToolSearchInput, result: SearchResult | None, output: ToolOutput
    ) -> str:
        return f"Searched tools for {args.query!r}"
