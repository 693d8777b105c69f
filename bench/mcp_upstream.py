"""The upstream MCP server of the `mcp` benchmark part: one `echo` tool, written with the `mcp`
SDK, over Streamable HTTP on loopback (`python -m bench.mcp_upstream PORT`)."""

from __future__ import annotations

import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("bench")


@server.tool()
def echo(text: str) -> str:
    """Answers its input."""
    return text


if __name__ == "__main__":
    server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
