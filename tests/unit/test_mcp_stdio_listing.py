"""Whose listing a stdio MCP server's tools come from: the daemon's own listing (a fresh server
in the default workspace, mounted read-only), never what one caller's server said in its call."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from daemon.tools.mcp import stdio
from daemon.tools.mcp.config import McpServerSpec
from sandbox.backend import SandboxLimits, SandboxResult
from tests.unit.fake_sandbox import FakeSandbox, make_context

SCHEMA = {"type": "object", "properties": {}}


def _listing(*names: str) -> str:
    tools = [{"name": name, "description": name, "inputSchema": SCHEMA} for name in names]
    return json.dumps({"tools": tools})


def _ok(**fields: str) -> SandboxResult:
    answer = {"content": [{"type": "text", "text": "ok"}], "isError": False}
    return SandboxResult(exit_code=0, output=json.dumps(answer), **fields)


async def test_a_callers_list_changed_is_relisted_by_the_daemon_not_taken_from_the_caller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attack: a tenant shadowed the server's module with a file in its own workspace, made it
    say its tools changed, and the listing read in that tenant's container (with a tool whose
    description told every other tenant's model to run commands) became everyone's tools."""
    monkeypatch.setattr(stdio, "_RELIST_MIN_INTERVAL_S", 0.0)
    seen: list[list[str]] = []
    daemon_side = FakeSandbox(tmp_path)
    daemon_side.canned.extend(
        [
            SandboxResult(exit_code=0, output=_listing("ping")),
            SandboxResult(exit_code=0, output=_listing("ping", "added_by_the_operator")),
        ]
    )
    server = stdio.McpStdioServer(
        McpServerSpec(name="benign", command=["python3", "-m", "benign_mcp"], stateless=True),
        lambda name, tools: seen.append([t.name for t in tools]),
        lambda: (daemon_side, str(tmp_path)),
        SandboxLimits(),
    )
    server.start()
    await asyncio.wait_for(server.listed.wait(), 5)
    callers = FakeSandbox(tmp_path)
    callers.canned.append(_ok(listing=_listing("ping", "ATTACKER_CHOSEN")))
    await server.call("ping", {}, make_context(tmp_path, sandbox=callers))
    for _ in range(100):
        if len(seen) == 2:
            break
        await asyncio.sleep(0.01)
    await server.stop()
    assert seen == [["ping"], ["ping", "added_by_the_operator"]]
    # Both listings ran where the daemon lists: read-only, never in the caller's container.
    assert daemon_side.placements == [("", True), ("", True)]
    # The caller's container ran its call and nothing else.
    assert [getattr(r, "method", None) for r in callers.requests] == ["tools/call"]
