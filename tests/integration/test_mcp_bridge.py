"""`tooljail mcp` driven by the mcp SDK's own stdio client, against a real daemon and OPA."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import mcp_types as types
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from tests.integration.harness import RunningDaemon, running_daemon
from tests.integration.test_service import free_port

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
APPROVAL_KEY = "tooljail/approval"


@asynccontextmanager
async def bridge(
    target: str,
    module: tuple[str, ...] = ("daemon.client.mcp_bridge",),
    env: dict[str, str] | None = None,
) -> AsyncIterator[ClientSession]:
    """An initialized MCP client session with the bridge (`python -m daemon.client.mcp_bridge`)."""
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", *module, "--target", target],
        env={"TOOLJAIL_LOG_LEVEL": "WARNING", **(env or {})},
        cwd=REPO,
    )
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def text_of(result: types.CallToolResult) -> str:
    return "".join(b.text for b in result.content if isinstance(b, types.TextContent))


def hints(tool: types.Tool) -> tuple[bool | None, ...]:
    notes = tool.annotations
    assert notes is not None, f"{tool.name} has no annotations"
    return (
        notes.read_only_hint,
        notes.destructive_hint,
        notes.idempotent_hint,
        notes.open_world_hint,
    )


def approval_meta(approval: dict[str, Any]) -> types.RequestParamsMeta:
    """A request `_meta` that carries an approval (an open map the SDK types as a TypedDict)."""
    return cast("types.RequestParamsMeta", {APPROVAL_KEY: approval})


def approval_of(result: types.CallToolResult) -> dict[str, Any] | None:
    value = (result.meta or {}).get(APPROVAL_KEY)
    return value if isinstance(value, dict) else None


@pytest.mark.docker
async def test_initialize_and_list_tools_with_annotations(sandbox_daemon: RunningDaemon) -> None:
    async with bridge(sandbox_daemon.target) as session:
        assert session.server_info is not None and session.server_info.name == "tooljail"
        listed = {tool.name: tool for tool in (await session.list_tools()).tools}

    assert set(listed) >= {"Read", "Write", "Edit", "MultiEdit", "Bash", "Glob", "Grep", "LS"}
    # (readOnlyHint, destructiveHint, idempotentHint, openWorldHint)
    assert hints(listed["Read"]) == (True, False, True, False)
    assert hints(listed["Grep"]) == (True, False, True, False)
    assert hints(listed["Write"]) == (False, True, False, False)
    assert hints(listed["Bash"]) == (False, True, False, True)

    # Schemas reach the MCP client exactly as the daemon advertises them (ints stay ints).
    daemon_tools = json.loads(sandbox_daemon.stub.ListTools(pb.ListToolsRequest()).tools_json)
    for spec in daemon_tools:
        assert listed[spec["name"]].input_schema == spec["input_schema"]
        assert listed[spec["name"]].description == spec["description"]


async def test_read_inside_the_workspace(host_daemon: RunningDaemon, workdir: Path) -> None:
    note = workdir / "note.txt"
    note.write_text("first line\nsecond line\n")
    async with bridge(host_daemon.target) as session:
        result = await session.call_tool("Read", {"file_path": str(note)})
    assert result.is_error is False, text_of(result)
    assert "     1\tfirst line" in text_of(result)
    assert "     2\tsecond line" in text_of(result)


async def test_read_outside_the_workspace_is_a_denied_error(host_daemon: RunningDaemon) -> None:
    async with bridge(host_daemon.target) as session:
        result = await session.call_tool("Read", {"file_path": "/etc/passwd"})
    assert result.is_error is True
    assert "denied" in text_of(result)
    assert "root:" not in text_of(result)
    assert approval_of(result) is None


async def test_unknown_tool_is_a_protocol_error(host_daemon: RunningDaemon) -> None:
    async with bridge(host_daemon.target) as session:
        with pytest.raises(MCPError, match=r"Unknown tool 'Nope'.*Read"):
            await session.call_tool("Nope", {})


async def test_invalid_input_is_the_daemons_error_result(host_daemon: RunningDaemon) -> None:
    async with bridge(host_daemon.target) as session:
        result = await session.call_tool("Read", {"file_path": "relative.txt", "bogus": 1})
    assert result.is_error is True
    assert "file_path" in text_of(result) or "bogus" in text_of(result)


@pytest.mark.docker
async def test_force_push_asks_for_approval(sandbox_daemon: RunningDaemon) -> None:
    async with bridge(sandbox_daemon.target) as session:
        result = await session.call_tool("Bash", {"command": "git push --force origin main"})
    approval = approval_of(result)
    if approval is None and "approval" not in text_of(result):
        pytest.skip(f"the policy does not ask for a force push yet: {text_of(result)!r}")
    assert result.is_error is True
    assert "approval" in text_of(result)
    assert approval is not None and approval["token"].startswith("tja1.")
    assert approval["tool_use_id"].startswith("mcp_")
    # The token is for the person approving, not for the model: it is not in the text.
    assert approval["token"] not in text_of(result)


@pytest.mark.docker
async def test_an_approved_call_runs_once(sandbox_daemon: RunningDaemon, sandbox_dir: Path) -> None:
    runs = sandbox_dir / "runs.txt"
    command = f"cd {sandbox_dir} && echo ran >> {runs} && git push --force origin main"
    async with bridge(sandbox_daemon.target) as session:
        asked = await session.call_tool("Bash", {"command": command})
        approval = approval_of(asked)
        if approval is None:
            pytest.skip(f"the policy does not ask for a force push yet: {text_of(asked)!r}")
        assert not runs.exists(), "an ASK must not run anything"
        approved = await session.call_tool(
            "Bash", {"command": command}, meta=approval_meta(approval)
        )
        again = await session.call_tool("Bash", {"command": command}, meta=approval_meta(approval))
    # It ran in the sandbox: git itself answers (the folder is no repository), not the policy.
    assert approved.is_error is True
    assert text_of(approved).startswith("Exit code 128"), text_of(approved)
    assert "not a git repository" in text_of(approved)
    assert approval_of(approved) is None
    # Sending the approved call again gets the remembered answer; the command did not run twice.
    assert text_of(again) == text_of(approved)
    assert runs.read_text() == "ran\n"


async def test_malformed_approval_meta_is_a_protocol_error(host_daemon: RunningDaemon) -> None:
    async with bridge(host_daemon.target) as session:
        with pytest.raises(MCPError, match="tool_use_id"):
            await session.call_tool(
                "Bash", {"command": "ls"}, meta=approval_meta({"token": "tja1.x"})
            )


async def test_unreachable_daemon_is_an_error_result(short_tmp: Path) -> None:
    target = f"unix://{short_tmp / 'nobody-listens.sock'}"
    async with bridge(target) as session:
        result = await session.call_tool("Read", {"file_path": "/tmp/x"})
        assert result.is_error is True
        assert "cannot be reached" in text_of(result) and "nothing ran" in text_of(result)
        with pytest.raises(MCPError, match="cannot be reached"):
            await session.list_tools()
        # The bridge is still serving after both failures.
        again = await session.call_tool("LS", {"path": "/tmp"})
        assert again.is_error is True


async def test_tooljail_mcp_command(host_daemon: RunningDaemon, workdir: Path) -> None:
    usage = subprocess.run(
        [sys.executable, "-m", "daemon.cli", "--help"],
        capture_output=True, text=True, timeout=60, check=False, cwd=REPO,
    )  # fmt: skip
    commands = re.search(r"\{([a-z,]+)\}", usage.stdout)
    if commands is None or "mcp" not in commands.group(1).split(","):
        pytest.skip("`tooljail mcp` is not wired into daemon/cli.py yet")
    (workdir / "c.txt").write_text("via the command\n")
    async with bridge(host_daemon.target, ("daemon.cli", "mcp")) as session:
        assert "Read" in {tool.name for tool in (await session.list_tools()).tools}
        result = await session.call_tool("Read", {"file_path": str(workdir / "c.txt")})
    assert result.is_error is False
    assert "     1\tvia the command" in text_of(result)


async def test_the_bridge_reaches_a_tcp_listener_with_a_token(short_tmp: Path) -> None:
    workspace = short_tmp / "ws-mcp-token"
    workspace.mkdir()
    (workspace / "a.txt").write_text("alpha\n")
    target = f"127.0.0.1:{free_port()}"
    with running_daemon(
        workspace,
        short_tmp / "mcp-token.sock",
        sandbox={"enabled": False},
        tcp={"address": target},
        auth={"tokens": {"mcp-agent": "mcp-token-value-41"}},
        workspaces={"tenant_defaults": "shared"},
    ) as daemon:
        async with bridge(target, env={"TOOLJAIL_TOKEN": "mcp-token-value-41"}) as session:
            result = await session.call_tool("Read", {"file_path": str(workspace / "a.txt")})
        assert result.is_error is False and "alpha" in text_of(result)
        principals = {r["principal"] for r in daemon.audit_lines() if r["tool"] == "Read"}
        assert principals == {"mcp-agent"}
