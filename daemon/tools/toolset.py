"""The tools in force: the built-ins, the operator's tools from the policy folder, and the tools
of the upstream MCP servers.

The operator's tools are read from the folder at start and again at every policy reload, all or
nothing: a folder with a bad definition is refused (ToolDefinitionError names the file, the
field and why) and the tools in force stay as they were. An MCP server's tools change whenever
the server says its listing changed. Each change builds a new registry and hands it on.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

import mcp_types as types

from daemon.tools.builtin import builtin_tools
from daemon.tools.contract import AnyTool
from daemon.tools.mcp.tool import mcp_tool
from daemon.tools.mcp.upstream import Upstream
from daemon.tools.operator.definition import ToolDefinitionError, load_specs
from daemon.tools.operator.tool import OperatorTool, operator_tool
from daemon.tools.registry import ToolRegistry

log = logging.getLogger(__name__)

MCP_DEFER_ABOVE = 8
"""A server with more tools than this has them found through ToolSearch (defer = "auto")."""


def operator_tools(policy_folder: Path) -> list[OperatorTool]:
    """The operator's tools of this policy folder. Raises ToolDefinitionError."""
    taken = frozenset(name for tool in builtin_tools() for name in (tool.name, *tool.aliases))
    return [operator_tool(spec) for spec in load_specs(policy_folder, taken)]


def tool_registry(policy_folder: Path, deferred: Iterable[str] = ()) -> ToolRegistry:
    """The built-ins and the operator's tools of this policy folder (no MCP servers)."""
    catalog = ToolCatalog(deferred)
    catalog.operator = operator_tools(policy_folder)
    return catalog.registry()


class ToolCatalog:
    """The three sources, and the registry they make."""

    def __init__(self, deferred: Iterable[str] = ()) -> None:
        self._deferred = frozenset(deferred)
        self.operator: list[OperatorTool] = []
        self._mcp: dict[str, list[AnyTool]] = {}
        self._mcp_deferred: set[str] = set()
        self._upstreams: dict[str, Upstream] = {}
        self.on_change: Callable[[ToolRegistry], None] | None = None

    def registry(self) -> ToolRegistry:
        """A registry of every tool now (ToolDefinitionError when the configured deferred tools
        name one that does not exist, or a name is taken twice)."""
        tools = [*builtin_tools(), *self.operator, *(t for ts in self._mcp.values() for t in ts)]
        names = {tool.name for tool in tools}
        deferred = {
            *self._deferred,
            *(tool.name for tool in self.operator if tool.spec.defer_loading),
            *(self._mcp_deferred & names),
        }
        try:
            return ToolRegistry(tools, deferred)
        except ValueError as exc:
            raise ToolDefinitionError(str(exc)) from exc

    def prepare_operator(self, tools: list[OperatorTool]) -> Callable[[], None]:
        """Check that these operator tools fit beside the others (ToolDefinitionError), and
        return how to put them in force."""
        previous, self.operator = self.operator, tools
        try:
            self.registry()
        finally:
            self.operator = previous

        def commit() -> None:
            self.operator = tools
            self._publish(self.registry())

        return commit

    def add_upstream(self, upstream: Upstream) -> None:
        """Keep an upstream server (its tools arrive through `upstream_tools`)."""
        self._upstreams[upstream.spec.name] = upstream

    def upstream_tools(self, server: str, listing: list[types.Tool]) -> None:
        """An upstream server's tools were (re)read: they replace its previous ones."""
        upstream = self._upstreams[server]
        made = [tool for tool in (mcp_tool(upstream, entry) for entry in listing) if tool]
        names = Counter(tool.name for tool in made)
        # Two remote tools made the same name ("a.b" and "a_b"): neither is taken, rather than
        # guessing which one a call (and a policy rule naming it) means.
        tools: list[AnyTool] = [tool for tool in made if names[tool.name] == 1]
        for name in sorted(name for name, count in names.items() if count > 1):
            log.warning(
                "MCP server %s: several of its tools become %s; none is listed", server, name
            )
        seen = {tool.name for tool in tools}
        defer = upstream.spec.defer
        if defer == "always" or (defer == "auto" and len(tools) > MCP_DEFER_ABOVE):
            self._mcp_deferred |= seen
        previous = self._mcp.get(server, [])
        self._mcp[server] = tools
        try:
            registry = self.registry()
        except ToolDefinitionError as exc:
            log.error("MCP server %s: its tools cannot join (%s)", server, exc)
            self._mcp[server] = previous
            return
        log.info("MCP server %s: %d tools", server, len(tools))
        self._publish(registry)

    def _publish(self, registry: ToolRegistry) -> None:
        if self.on_change is not None:
            self.on_change(registry)
