"""An upstream MCP server for the tests, written with the `mcp` SDK, served over Streamable HTTP
on loopback (`python -m tests.integration.mcp_upstream PORT`, answers as SSE; `PORT json`: as
plain JSON bodies) or over stdio (`... stdio`, as the sandbox runs it)."""

from __future__ import annotations

import asyncio
import base64
import os
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ImageContent, ToolAnnotations

PNG = b"\x89PNG\r\n\x1a\n upstream"

server = MCPServer("upstream")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b


@server.tool(annotations=ToolAnnotations(destructiveHint=True))
def shout(text: str) -> str:
    """Upper-cases text."""
    return text.upper()


@server.tool()
def picture() -> ImageContent:
    """A small picture."""
    return ImageContent(type="image", data=base64.b64encode(PNG).decode(), mime_type="image/png")


@server.tool()
def big(size: int) -> str:
    """A long text."""
    return "y" * size


@server.tool()
async def sleep(seconds: float) -> str:
    """Sleeps, then answers."""
    await asyncio.sleep(seconds)
    return "awake"


@server.tool()
async def steps(n: int, ctx: Context) -> str:
    """Reports its progress n times, a little apart."""
    for done in range(1, n + 1):
        await ctx.report_progress(done, n, "step")
        await asyncio.sleep(0.2)
    return "done"


_calls = 0


@server.tool()
def count() -> str:
    """Counts the calls this server process answered (and says which process it is)."""
    global _calls
    _calls += 1
    return f"{_calls} from {os.getpid()}"


@server.tool()
def die() -> str:
    """Kills the server in the middle of the call."""
    os._exit(3)


@server.tool()
def write_note(text: str) -> str:
    """Writes note.txt in the directory it runs in."""
    with open("note.txt", "w") as note:
        note.write(text)
    return f"wrote note.txt as uid {os.getuid()} in {os.getcwd()}"


@server.tool()
async def grow(name: str, ctx: Context) -> str:
    """Adds a tool and tells the client its tool list changed."""

    def extra() -> str:
        return f"{name} here"

    server.add_tool(extra, name=name, description="added while running")
    await ctx.session.send_tool_list_changed()
    return "grown"


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        json_response = sys.argv[2:] == ["json"]
        server.run(
            "streamable-http", host="127.0.0.1", port=int(sys.argv[1]), json_response=json_response
        )
