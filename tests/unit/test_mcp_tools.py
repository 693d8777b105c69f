"""Upstream MCP tools without a server: names, schemas, traits (annotations believed only from a
trusted server), result mapping, and the catalog that composes the registry."""

from __future__ import annotations

import base64
from typing import Any

import mcp_types as types
import pytest

from daemon.models import ImageContent
from daemon.tools.contract import ToolOrigin
from daemon.tools.mcp.config import McpServerSpec
from daemon.tools.mcp.tool import mcp_tool, tool_name
from daemon.tools.mcp.upstream import McpAnswer, McpServerError, McpUpstream
from daemon.tools.registry import ToolRegistry
from daemon.tools.toolset import MCP_DEFER_ABOVE, ToolCatalog
from tests.unit.fake_sandbox import make_context, run_tool, text_of

SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}


def _listing(name: str = "search", **fields: Any) -> types.Tool:
    return types.Tool(
        **{"name": name, "description": "Searches.", "input_schema": SCHEMA, **fields}
    )


class _Answering(McpUpstream):
    """An upstream whose calls return a canned answer (or raise)."""

    def __init__(self, spec: McpServerSpec, answer: types.CallToolResult | Exception) -> None:
        super().__init__(spec, lambda server, tools: None)
        self.answer = answer
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def call(self, tool: str, arguments: dict[str, Any], ctx: object = None) -> McpAnswer:
        self.calls.append((tool, arguments))
        if isinstance(self.answer, Exception):
            raise self.answer
        return McpAnswer(self.answer)


def _spec(**fields: Any) -> McpServerSpec:
    return McpServerSpec(name="docs", url="http://127.0.0.1:9/mcp", **fields)


@pytest.mark.parametrize("name", ["a__b", "", "x" * 25, "white space", "_lead"])
def test_server_names_that_would_make_tool_names_ambiguous_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="letters"):
        McpServerSpec.model_validate({"name": name, "url": "http://h/mcp"})


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"image": "--privileged"}, "an image reference"),
        ({"image": "Registry.Example/Upper:1"}, "an image reference"),
        ({"url": "http://h/mcp", "command": ["srv"]}, "either url"),
        ({"url": "http://h/mcp", "stateless": True}, "stateless are for servers"),
        ({"url": "file:///etc/passwd"}, "http:// or https://"),
    ],
)
def test_bad_server_configs_are_refused_saying_why(fields: dict[str, Any], why: str) -> None:
    config = {"name": "box", **({"command": ["srv"]} if "url" not in fields else {}), **fields}
    with pytest.raises(ValueError, match=why):
        McpServerSpec.model_validate(config)
    assert (
        McpServerSpec.model_validate(
            {"name": "box", "command": ["srv"], "image": "tooljail-mcp:1"}
        ).image
        == "tooljail-mcp:1"
    )


def test_tool_names_are_made_safe_and_bounded() -> None:
    assert tool_name("docs", "search.v2 beta") == "mcp__docs__search_v2_beta"
    assert tool_name("docs", "x" * 60) is None


def test_untrusted_servers_get_the_conservative_traits_whatever_they_claim() -> None:
    claims = types.ToolAnnotations(readOnlyHint=True, destructiveHint=False)
    untrusted = mcp_tool(_Answering(_spec(), Exception()), _listing(annotations=claims))
    trusted = mcp_tool(_Answering(_spec(trusted=True), Exception()), _listing(annotations=claims))
    assert untrusted is not None and trusted is not None
    assert not untrusted.traits.read_only and untrusted.traits.destructive
    assert not untrusted.traits.concurrency_safe and not untrusted.traits.sandboxed
    assert trusted.traits.read_only and trusted.traits.concurrency_safe
    assert untrusted.origin == ToolOrigin(kind="mcp", server="docs", trusted=False)


@pytest.mark.parametrize(
    "schema", [{"type": "array"}, {"type": "object", "properties": {"q": {"type": 5}}}]
)
def test_a_tool_whose_schema_is_not_a_valid_object_schema_is_left_out(
    schema: dict[str, Any],
) -> None:
    entry = types.Tool(name="bad", input_schema=schema)
    assert mcp_tool(_Answering(_spec(), Exception()), entry) is None


async def test_results_map_to_blocks_under_the_tools_name(tmp_path: Any) -> None:
    png = base64.b64encode(b"PNG!").decode()
    answer = types.CallToolResult(
        content=[
            types.TextContent(type="text", text="found 2"),
            types.ImageContent(type="image", data=png, mime_type="image/png"),
            types.EmbeddedResource(
                type="resource",
                resource=types.TextResourceContents(uri="file:///a.md", text="# A"),
            ),
            types.EmbeddedResource(
                type="resource",
                resource=types.BlobResourceContents(
                    uri="file:///b.bin", blob=base64.b64encode(b"x" * 30).decode()
                ),
            ),
            types.ResourceLink(type="resource_link", uri="https://x/c", name="c"),
            types.AudioContent(type="audio", data=png, mime_type="audio/wav"),
        ],
        is_error=False,
    )
    upstream = _Answering(_spec(), answer)
    tool = mcp_tool(upstream, _listing())
    assert tool is not None
    output = await run_tool(tool, {"q": "x"}, make_context(tmp_path))
    assert not output.is_error and upstream.calls == [("search", {"q": "x"})]
    assert isinstance(output.content[1], ImageContent) and output.content[1].data == b"PNG!"
    text = text_of(output)
    assert "found 2" in text and "[resource file:///a.md]\n# A" in text
    assert "[binary resource file:///b.bin" in text and "[resource link https://x/c: c]" in text
    assert "[docs sent audio content, not shown here]" in text


async def test_structured_only_errors_and_failures(tmp_path: Any) -> None:
    structured = types.CallToolResult(content=[], structured_content={"n": 1}, is_error=True)
    tool = mcp_tool(_Answering(_spec(), structured), _listing())
    assert tool is not None
    output = await run_tool(tool, {"q": "x"}, make_context(tmp_path))
    assert output.is_error and text_of(output) == '{"n": 1}'
    invalid = await run_tool(tool, {"q": 3}, make_context(tmp_path))
    assert invalid.is_error and "`q`: 3 is not of type 'string'" in text_of(invalid)
    failing = mcp_tool(
        _Answering(_spec(), McpServerError("The MCP server docs is down")), _listing()
    )
    assert failing is not None
    down = await run_tool(failing, {"q": "x"}, make_context(tmp_path))
    assert down.is_error and text_of(down) == "The MCP server docs is down"


def test_the_catalog_adds_replaces_and_defers_a_servers_tools() -> None:
    published: list[ToolRegistry] = []
    catalog = ToolCatalog()
    catalog.on_change = published.append
    upstream = _Answering(_spec(), Exception())
    catalog.add_upstream(upstream)
    catalog.upstream_tools("docs", [_listing("a"), _listing("b"), _listing("c")])
    assert [n for n in published[-1].names() if n.startswith("mcp__")] == [
        "mcp__docs__a",
        "mcp__docs__b",
        "mcp__docs__c",
    ]
    # Two remote tools that would share a name: neither is guessed at.
    catalog.upstream_tools("docs", [_listing("a"), _listing("b.x"), _listing("b_x"), _listing("a")])
    assert [n for n in published[-1].names() if n.startswith("mcp__")] == []
    catalog.upstream_tools("docs", [_listing("a"), _listing("b"), _listing("a")])
    many = [_listing(f"t{i}") for i in range(MCP_DEFER_ABOVE + 1)]
    catalog.upstream_tools("docs", many)
    registry = published[-1]
    assert "mcp__docs__a" not in registry.names()
    assert registry.definition("mcp__docs__t0").defer_loading


def test_a_schema_referring_outside_itself_is_left_out_and_never_fetched() -> None:
    import socket

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.settimeout(0.5)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/schema.json"
        remote = {"type": "object", "properties": {"q": {"$ref": url}}}
        assert mcp_tool(_Answering(_spec(), Exception()), _listing(input_schema=remote)) is None
        with pytest.raises(TimeoutError):
            listener.accept()  # nobody came to fetch it


async def test_an_upstream_regex_is_not_run_by_the_daemon(tmp_path: Any) -> None:
    """(a+)+$ takes exponential time on "aaa...!": the server checks its own patterns."""
    evil = {
        "type": "object",
        "properties": {"q": {"type": "string", "pattern": "^(a+)+$"}},
        "patternProperties": {"^(b+)+$": {"type": "string"}},
        "additionalProperties": False,
    }
    answer = types.CallToolResult(content=[types.TextContent(type="text", text="ok")])
    tool = mcp_tool(_Answering(_spec(), answer), _listing(input_schema=evil))
    assert tool is not None and tool.input_schema()["properties"]["q"]["pattern"] == "^(a+)+$"
    output = await run_tool(tool, {"q": "a" * 64 + "!"}, make_context(tmp_path))
    assert text_of(output) == "ok"


async def test_a_stdio_server_answering_garbage_is_an_error_naming_it(tmp_path: Any) -> None:
    from daemon.tools.mcp.stdio import McpStdioServer
    from sandbox.backend import SandboxLimits, SandboxResult
    from tests.unit.fake_sandbox import FakeSandbox

    spec = McpServerSpec(name="box", command=("server",))
    sandbox = FakeSandbox(tmp_path)
    ctx = make_context(tmp_path, sandbox=sandbox)
    server = McpStdioServer(spec, lambda name, tools: None, lambda: None, SandboxLimits())
    for output, error, expected in [
        ("not json at all", "", "answered add with garbage"),
        ('{"content": "not a list"}', "", "answered add with a malformed result"),
        ("", "the MCP server printed a line that is not JSON: 'hello'", "failed add"),
    ]:
        sandbox.canned.append(SandboxResult(output=output, error=error, stderr="boom"))
        with pytest.raises(McpServerError, match=expected):
            await server.call("add", {"a": 1}, ctx)


class _Pages:
    """A client whose server lists tools page after page, without end."""

    def __init__(self, description_bytes: int = 10) -> None:
        self.asked = 0
        self._description = "d" * description_bytes

    async def list_tools(self, cursor: str | None = None) -> types.ListToolsResult:
        self.asked += 1
        tool = types.Tool(
            name=f"t{self.asked}", description=self._description, input_schema={"type": "object"}
        )
        return types.ListToolsResult(tools=[tool], next_cursor=str(self.asked))


@pytest.mark.parametrize(("description_bytes", "most_pages"), [(10, 20), (3_000_000, 3)])
async def test_a_listing_without_end_is_read_only_so_far(
    description_bytes: int, most_pages: int
) -> None:
    listed: list[list[types.Tool]] = []
    upstream = McpUpstream(_spec(), lambda _name, tools: listed.append(tools))
    pages = _Pages(description_bytes)
    await upstream._read_tools(pages)  # type: ignore[arg-type]
    assert pages.asked <= most_pages and len(listed) == 1
    assert sum(len(t.model_dump_json()) for t in listed[0]) <= 8 << 20
