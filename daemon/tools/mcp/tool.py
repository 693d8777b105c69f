"""A tool of an upstream MCP server as a Tool: `mcp__<server>__<tool>`, the server's JSON Schema
checked by a real validator (a schema that is not one is refused, the tool left out), traits from
its annotations only when the operator trusts the server (otherwise the conservative defaults),
and its results (text, images, embedded resources, resource links, structuredContent, isError)
mapped to tool_result content under the same budget as any other tool.

A Streamable HTTP server's call happens on that server: tooljail decides it, audits it, bounds its
time and its result; what the server does with it is the server's (`sandboxed: false` in the
policy input). A stdio server runs in the sandbox over the caller's workspace (`sandboxed: true`,
the workspace among the call's paths).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import re
from typing import Any, ClassVar, Literal

import mcp_types as types

from daemon.errors import ToolInputError
from daemon.models import ContentBlock, ImageContent, TextContent
from daemon.sessions.session import Session
from daemon.tools.contract import (
    CallContext,
    CallFacts,
    InterruptBehavior,
    Tool,
    ToolOrigin,
    ToolOutput,
    ToolTraits,
    TouchedPath,
)
from daemon.tools.json_schema import SchemaProblem, input_validator, isolated_checks
from daemon.tools.mcp.upstream import McpAnswer, Upstream
from daemon.tools.operator.tool import MAX_BLOCKS, OperatorInput

log = logging.getLogger(__name__)

_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")
MAX_DESCRIPTION_CHARS = 4_000
RESULT_BUDGET_CHARS = 50_000


def tool_name(server: str, tool: str) -> str | None:
    """`mcp__<server>__<tool>`, the tool's name made safe; None when it would be too long."""
    name = f"mcp__{server}__{_UNSAFE.sub('_', tool)}"
    return name if len(name) <= 64 else None


class McpTool(Tool[OperatorInput, McpAnswer]):
    """Base of the classes `mcp_tool` makes, one per upstream tool."""

    input_model = OperatorInput
    upstream: ClassVar[Upstream]
    remote_name: ClassVar[str]
    schema: ClassVar[dict[str, Any]]
    prepares_off_loop = True

    def input_schema(self) -> dict[str, Any]:
        copy: dict[str, Any] = json.loads(json.dumps(self.schema))
        return copy

    def validate(self, args: OperatorInput, session: Session) -> OperatorInput:
        document = args.model_dump(mode="json")
        errors = isolated_checks().errors(
            self.schema, document, run_regexes=False, who=session.owner
        )
        if errors:
            raise ToolInputError(
                f"Invalid input for the {self.name} tool:\n"
                + "\n".join(errors)
                + f"\nFix the input to match the {self.name} input schema and call it again."
            )
        return args

    def analyse(self, args: OperatorInput, session: Session) -> CallFacts:
        if not self.traits.sandboxed:
            return self.facts()  # it runs on its server: nothing here is touched
        # A stdio server runs in the sandbox over the workspace, as the policy must know.
        access: Literal["read", "write"] = "read" if self.traits.read_only else "write"
        return self.facts(paths=[TouchedPath.of(session.workspace, session.workspace, access)])

    async def call(self, args: OperatorInput, ctx: CallContext) -> McpAnswer:
        return await self.upstream.call(self.remote_name, args.model_dump(mode="json"), ctx)

    def render(self, result: McpAnswer) -> ToolOutput:
        answer = result.result
        content = _content(answer, self.upstream.spec.name)
        return ToolOutput(
            content=content, is_error=bool(answer.is_error), sandbox_id=result.sandbox_id
        )

    def summarize(self, args: OperatorInput, result: McpAnswer | None, output: ToolOutput) -> str:
        server = self.upstream.spec.name
        state = "failed" if output.is_error else "done"
        return f"{self.name} ({server}): {state}"


def _content(answer: types.CallToolResult, server: str) -> list[ContentBlock]:
    blocks: list[ContentBlock] = []
    if len(answer.content) > MAX_BLOCKS:
        blocks.append(TextContent(text=f"[{server} sent {len(answer.content)} content blocks; "
                                  f"the first {MAX_BLOCKS} are shown]"))  # fmt: skip
    for block in answer.content[:MAX_BLOCKS]:
        if isinstance(block, types.TextContent):
            blocks.append(TextContent(text=block.text))
        elif isinstance(block, types.ImageContent) and block.mime_type in _IMAGE_TYPES:
            try:
                data = base64.b64decode(block.data, validate=True)
            except (binascii.Error, ValueError):
                blocks.append(TextContent(text=f"[{server} sent an image that is not base64]"))
                continue
            blocks.append(ImageContent(media_type=block.mime_type, data=data))
        elif isinstance(block, types.EmbeddedResource):
            resource = block.resource
            if isinstance(resource, types.TextResourceContents):
                blocks.append(TextContent(text=f"[resource {resource.uri}]\n{resource.text}"))
            else:
                size = len(resource.blob) * 3 // 4
                mime = resource.mime_type or "unknown type"
                text = f"[binary resource {resource.uri}: {mime}, about {size} bytes]"
                blocks.append(TextContent(text=text))
        elif isinstance(block, types.ResourceLink):
            blocks.append(TextContent(text=f"[resource link {block.uri}: {block.name}]"))
        else:
            kind = getattr(block, "type", type(block).__name__)
            blocks.append(TextContent(text=f"[{server} sent {kind} content, not shown here]"))
    if not blocks and answer.structured_content is not None:
        blocks.append(TextContent(text=json.dumps(answer.structured_content, ensure_ascii=False)))
    if not blocks:
        blocks.append(TextContent(text="(no output)"))
    return blocks


def _traits(tool: types.Tool, trusted: bool, sandboxed: bool) -> ToolTraits:
    hints = tool.annotations
    base = ToolTraits(sandboxed=sandboxed, max_result_chars=RESULT_BUDGET_CHARS)
    if not trusted or hints is None:
        return base
    read_only = hints.read_only_hint is True
    return ToolTraits(
        read_only=read_only,
        destructive=not read_only and hints.destructive_hint is not False,
        concurrency_safe=read_only,
        sandboxed=sandboxed,
        interrupt=InterruptBehavior.CANCEL if read_only else InterruptBehavior.BLOCK,
        max_result_chars=RESULT_BUDGET_CHARS,
    )


def mcp_tool(upstream: Upstream, tool: types.Tool) -> McpTool | None:
    """The tool of one upstream listing entry; None (logged) when it cannot be offered."""
    server = upstream.spec.name
    name = tool_name(server, tool.name)
    if name is None:
        log.warning("MCP server %s: tool %r: its name is too long; left out", server, tool.name)
        return None
    schema = dict(tool.input_schema)
    try:
        input_validator(schema, run_regexes=False)
    except SchemaProblem as exc:
        log.warning("MCP server %s: tool %r: %s; left out", server, tool.name, exc)
        return None
    description = (tool.description or tool.title or tool.name)[:MAX_DESCRIPTION_CHARS]
    cls = type(
        f"McpTool_{name}",
        (McpTool,),
        {
            "name": name,
            "description": description,
            "traits": _traits(tool, upstream.spec.trusted, sandboxed=bool(upstream.spec.command)),
            "origin": ToolOrigin(kind="mcp", server=server, trusted=upstream.spec.trusted),
            "upstream": upstream,
            "remote_name": tool.name,
            "schema": schema,
            "search_hint": f"{server} {tool.title or ''}".strip(),
        },
    )
    made: McpTool = cls()
    return made
