"""A small MCP server to put behind tooljail, offline: notes kept in memory.

Run it with `python examples/mcp/notes_server.py 8765` (Streamable HTTP on 127.0.0.1:8765/mcp),
or with `... stdio` (as a [[mcp_servers]] command). It needs the `mcp` SDK, which tooljail's
virtualenv has.
"""

from __future__ import annotations

import sys

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

server = MCPServer("notes")
NOTES: dict[str, str] = {}


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def list_notes() -> list[str]:
    """The titles of the notes."""
    return sorted(NOTES)


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def read_note(title: str) -> str:
    """One note's text."""
    return NOTES.get(title, f"no note called {title!r}")


@server.tool(annotations=ToolAnnotations(destructiveHint=True))
def write_note(title: str, text: str) -> str:
    """Writes (or replaces) a note."""
    NOTES[title] = text
    return f"saved {title!r}"


if __name__ == "__main__":
    if sys.argv[1:] == ["stdio"]:
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
