"""MCP bridge: the daemon's tools served over MCP on stdio (`tooljail mcp`).

An MCP client (Claude Desktop, Claude Code, an IDE) starts the bridge as a subprocess; the bridge
answers `tools/list` from the daemon's ListTools and `tools/call` through its Execute, over gRPC.
It keeps no tool logic of its own: schemas, validation, policy and execution stay in the daemon.

How the daemon's answers map onto MCP (docs/mcp.md says the same for users):

- Tool traits become annotations: readOnlyHint = read_only; destructiveHint = destructive;
  idempotentHint = read_only (reading twice changes nothing; no writing tool is promised to be
  idempotent, since Bash is not and Edit's second run is an error); openWorldHint is true only for
  tools that may reach past the workspace (Bash, when the policy grants it network).
- Each call gets a fresh tool_use id (`mcp_<hex>`): MCP has no id of its own to key on.
- A tool_result becomes `content` (text, images as ImageContent) and `isError`.
- A policy ASK is an error result whose text says a person's approval is needed. The approval
  token is not put in the text, where the model would read it, but in the result's `_meta` under
  `tooljail/approval`; a client that lets a person approve sends the same call again with that
  object in the request's `_meta`, and the bridge resends the same tool_use with the token.
- A daemon that cannot be reached, or a gRPC error, is an error result that says so; the bridge
  keeps running. Only an unknown tool name is a protocol error, as MCP asks.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import sys
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, cast

import anyio
import grpc
import mcp_types as types
from google.protobuf import json_format
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from tooljail.wire import pb, pb_grpc

from daemon import __version__
from daemon.client.connection import (
    DEFAULT_TARGET,
    Connection,
    ConnectionOptionError,
    add_arguments,
    client_log_level,
    from_args,
)
from daemon.ops.logs import configure_logging

__all__ = [
    "APPROVAL_META_KEY",
    "OPEN_WORLD_TOOLS",
    "Bridge",
    "main",
    "mcp_result",
    "mcp_tools",
    "run_mcp",
    "tool_annotations",
]

logger = logging.getLogger(__name__)

APPROVAL_META_KEY = "tooljail/approval"
"""`_meta` key of an ASK result (and of the approved retry): {"token": ..., "tool_use_id": ...}."""

OPEN_WORLD_TOOLS = frozenset({"Bash"})
"""Tools that may reach past the workspace: a command may be granted network by the policy.
The daemon's traits carry no such flag yet, so the bridge names them."""

_INSTRUCTIONS = (
    "These tools run through tooljail: every call is checked by a policy and confined to the "
    "session's workspace; file paths are absolute paths inside it. A refused call explains why "
    "and what to do instead."
)


def tool_annotations(name: str, traits: pb.ToolTraits) -> types.ToolAnnotations:
    """MCP hints from the daemon's traits (see the module docstring for the reasoning)."""
    return types.ToolAnnotations(
        read_only_hint=traits.read_only,
        destructive_hint=traits.destructive and not traits.read_only,
        idempotent_hint=traits.read_only,
        open_world_hint=name in OPEN_WORLD_TOOLS,
    )


def mcp_tools(response: pb.ListToolsResponse) -> list[types.Tool]:
    """The daemon's tool list as MCP tools.

    The input schemas come from `tools_json`, byte for byte what the daemon advertises to
    Anthropic models: the protobuf Struct form would turn every integer into a float.
    """
    traits = {tool.name: tool.traits for tool in response.tools}
    tools = []
    for spec in json.loads(response.tools_json):
        name = spec["name"]
        tools.append(
            types.Tool(
                name=name,
                description=spec.get("description") or None,
                input_schema=spec["input_schema"],
                annotations=tool_annotations(name, traits.get(name, pb.ToolTraits())),
            )
        )
    return tools


def _content(block: pb.ContentBlock) -> types.TextContent | types.ImageContent:
    if block.HasField("image"):
        data = base64.b64encode(block.image.data).decode("ascii")
        return types.ImageContent(data=data, mime_type=block.image.media_type)
    return types.TextContent(text=block.text.text)


def mcp_result(response: pb.ExecuteResponse) -> types.CallToolResult:
    """The daemon's answer as an MCP tool result (an ASK carries its token in `_meta`)."""
    content: list[types.ContentBlock] = [_content(b) for b in response.result.content]
    decision = response.decision
    if decision.outcome != pb.ASK or not decision.approval_token:
        return types.CallToolResult(content=content, is_error=response.result.is_error)
    content.append(
        types.TextContent(
            text="Only a person can give this approval, in the MCP client and not from inside "
            "the conversation: tell the user what the call would do and why it is needed."
        )
    )
    approval = {"token": decision.approval_token, "tool_use_id": response.result.tool_use_id}
    return types.CallToolResult(content=content, is_error=True, _meta={APPROVAL_META_KEY: approval})


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)


def _approval_from(meta: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """(tool_use id, token) of an approved retry, or None; a malformed one is a protocol error."""
    value = (meta or {}).get(APPROVAL_META_KEY)
    if value is None:
        return None
    if isinstance(value, dict):
        token, tool_use_id = value.get("token"), value.get("tool_use_id")
        if isinstance(token, str) and token and isinstance(tool_use_id, str) and tool_use_id:
            return tool_use_id, token
    raise MCPError(
        types.INVALID_PARAMS,
        f"_meta[{APPROVAL_META_KEY!r}] must be the object the ASK result carried: "
        '{"token": "...", "tool_use_id": "..."}',
    )


class Bridge:
    """Answers MCP tool requests through one daemon connection."""

    def __init__(
        self, stub: pb_grpc.ExecutorAsyncStub, target: str, session: str, timeout: float
    ) -> None:
        self._stub = stub
        self._target = target
        self._session = session
        self._timeout = timeout
        self._names: frozenset[str] = frozenset()

    def server(self) -> Server[Any]:
        """The MCP server whose handlers are this bridge's methods."""
        return Server(
            "tooljail",
            version=__version__,
            instructions=_INSTRUCTIONS,
            on_list_tools=self.list_tools,
            on_call_tool=self.call_tool,
        )

    async def _fetch_tools(self) -> list[types.Tool]:
        response = await self._stub.ListTools(
            pb.ListToolsRequest(session_id=self._session), timeout=self._timeout
        )
        tools = mcp_tools(response)
        self._names = frozenset(tool.name for tool in tools)
        return tools

    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        """tools/list: the daemon's (policy-filtered) ListTools."""
        try:
            return types.ListToolsResult(tools=await self._fetch_tools())
        except grpc.aio.AioRpcError as exc:
            # tools/list has no error result: the client can only show a protocol error.
            raise MCPError(types.INTERNAL_ERROR, self._rpc_failure(exc, "list its tools")) from None

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        """tools/call: one Execute; every failure past an unknown name is an error result."""
        approval = _approval_from(cast("Mapping[str, Any] | None", params.meta))
        try:
            if params.name not in self._names:
                await self._fetch_tools()
        except grpc.aio.AioRpcError as exc:
            return _error(self._rpc_failure(exc, "list its tools"))
        if params.name not in self._names:
            available = ", ".join(sorted(self._names)) or "none"
            raise MCPError(
                types.INVALID_PARAMS,
                f"Unknown tool {params.name!r}; the tools are: {available}.",
            )
        tool_use_id, token = approval or (f"mcp_{uuid.uuid4().hex}", "")
        tool_use = json_format.ParseDict(
            {"id": tool_use_id, "name": params.name, "input": params.arguments or {}}, pb.ToolUse()
        )
        request = pb.ExecuteRequest(
            session_id=self._session, tool_use=tool_use, approval_token=token
        )
        try:
            response = await self._stub.Execute(request, timeout=self._timeout)
        except grpc.aio.AioRpcError as exc:
            return _error(self._rpc_failure(exc, f"run {params.name}"))
        return mcp_result(response)

    def _rpc_failure(self, exc: grpc.aio.AioRpcError, what: str) -> str:
        code, details = exc.code(), exc.details() or "no details"
        if code == grpc.StatusCode.UNAVAILABLE:
            return (
                f"The tooljail daemon at {self._target} cannot be reached ({details}), so it "
                f"could not {what}; nothing ran. Start it (`tooljail serve`) or point the bridge "
                "at it with --target, then try again."
            )
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return (
                f"The tooljail daemon did not answer within {self._timeout:g} s when asked to "
                f"{what}; the call may still have run. Check its effects before trying again."
            )
        return f"The tooljail daemon refused to {what}: {code.name}: {details}"


async def serve_stdio(target: str | Connection, session: str = "", timeout: float = 900.0) -> None:
    """Serve MCP on this process's stdin/stdout until the client closes them."""
    connection = target if isinstance(target, Connection) else Connection(target)
    async with connection.aio_channel() as channel:
        bridge = Bridge(pb_grpc.ExecutorStub(channel), connection.target, session, timeout)
        server = bridge.server()
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())


def run_mcp(target: str | Connection, session: str = "", timeout: float = 900.0) -> int:
    """Entry point of `tooljail mcp`: returns the exit code."""
    shown = target.target if isinstance(target, Connection) else target
    logger.info("MCP bridge on stdio for the daemon at %s", shown)
    anyio.run(serve_stdio, target, session, timeout)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m daemon.client.mcp_bridge`: the bridge without the rest of the CLI."""
    default = os.environ.get("TOOLJAIL_TARGET", DEFAULT_TARGET)
    parser = argparse.ArgumentParser(prog="tooljail mcp", description=__doc__.splitlines()[0])
    add_arguments(parser, default)
    parser.add_argument("--session", default="", help="session id (default session if empty)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait per call")
    args = parser.parse_args(argv)
    configure_logging(json=False, level=client_log_level())
    try:
        connection = from_args(args)
    except ConnectionOptionError as exc:
        parser.error(str(exc))
    return run_mcp(connection, args.session, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
