"""Upstream MCP servers through a real daemon and the real OPA: a server written with the `mcp`
SDK (tests/integration/mcp_upstream.py) over Streamable HTTP on loopback. Its tools are listed as
mcp__up__<tool>, called through the same gate as the built-ins, denied where the policy says so;
list_changed is honoured; a server that crashes mid-call, hangs past its deadline or goes away
gives an is_error result naming it, and is reconnected once it is back."""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon.config import PROJECT_ROOT
from tests.integration.harness import RunningDaemon, policies_for, running_daemon, text_of
from tests.integration.mcp_flooder import Flooder
from tests.integration.test_mcp_bridge import bridge
from tests.integration.test_mcp_bridge import text_of as bridge_text
from tests.integration.test_service import free_port

pytestmark = pytest.mark.integration

PNG = b"\x89PNG\r\n\x1a\n upstream"


class Upstream:
    """The test server in a process of its own, restartable on the same port."""

    def __init__(self, port: int, *, json_answers: bool = False) -> None:
        self.port = port
        self.json_answers = json_answers
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if self.process is not None:
            self.process.wait(30)  # the previous one is gone (it crashed, or was stopped)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.mcp_upstream", str(self.port)]
            + (["json"] if self.json_answers else []),
            cwd=PROJECT_ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.1)
        raise RuntimeError("the upstream MCP server did not start")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


def _policies(
    folder: Path, servers: tuple[str, ...] = ("up", "upjson"), **principal: list[str]
) -> Path:
    local = {"mcp_servers": list(servers), "ask_tools": ["mcp__up__shout"], **principal}
    return policies_for(folder, local)


@pytest.fixture(scope="module")
def world(short_tmp: Path) -> Iterator[tuple[RunningDaemon, Upstream]]:
    upstream = Upstream(free_port())
    upstream.start()
    plain = Upstream(free_port(), json_answers=True)
    plain.start()
    workspace = short_tmp / "ws-mcp-up"
    workspace.mkdir()
    server = {
        "name": "up",
        "url": f"http://127.0.0.1:{upstream.port}/mcp",
        "trusted": True,
        "timeout_s": 3,
        "defer": "never",
    }
    plain_server = {**server, "name": "upjson", "url": f"http://127.0.0.1:{plain.port}/mcp"}
    try:
        with running_daemon(
            workspace,
            short_tmp / "mcp-up.sock",
            sandbox={"enabled": False},
            opa={"policies_dir": _policies(short_tmp / "mcp-up")},
            mcp_servers=[server, plain_server],
        ) as daemon:
            _wait_for(daemon, "mcp__up__add")
            _wait_for(daemon, "mcp__upjson__add")
            yield daemon, upstream
    finally:
        upstream.stop()
        plain.stop()


def _names(daemon: RunningDaemon) -> set[str]:
    response = daemon.stub.ListTools(pb.ListToolsRequest(), timeout=30)
    return {tool.name for tool in response.tools}


def _wait_for(daemon: RunningDaemon, name: str, present: bool = True) -> None:
    deadline = time.monotonic() + 60
    while (name in _names(daemon)) != present:
        if time.monotonic() > deadline:
            raise AssertionError(f"{name} never {'appeared' if present else 'went'}")
        time.sleep(0.2)


def test_the_servers_tools_are_listed_with_their_schema_and_traits(
    world: tuple[RunningDaemon, Upstream],
) -> None:
    daemon, _ = world
    listed = daemon.stub.ListTools(pb.ListToolsRequest(), timeout=30)
    tools = {tool.name: tool for tool in listed.tools}
    assert {"mcp__up__add", "mcp__up__shout", "mcp__up__picture", "Read"} <= set(tools)
    add = tools["mcp__up__add"]
    assert add.traits.read_only and not add.traits.sandboxed  # trusted: its readOnlyHint counts
    assert tools["mcp__up__shout"].traits.destructive
    assert add.origin == pb.ToolOrigin(kind="mcp", server="up", trusted=True)
    assert tools["Read"].origin == pb.ToolOrigin(kind="builtin", trusted=True)
    schema = json.loads(listed.tools_json)
    add_schema = next(t for t in schema if t["name"] == "mcp__up__add")["input_schema"]
    assert add_schema["required"] == ["a", "b"]


def test_calls_go_through_the_gate_and_map_their_results(
    world: tuple[RunningDaemon, Upstream],
) -> None:
    daemon, _ = world
    added = daemon.execute("mcp__up__add", {"a": 2, "b": 40})
    assert not added.result.is_error, text_of(added)
    assert text_of(added) == "42" and added.decision.outcome == pb.ALLOW
    picture = daemon.execute("mcp__up__picture", {})
    assert picture.result.content[0].image.data == PNG
    invalid = daemon.execute("mcp__up__add", {"a": "two"})
    assert invalid.result.is_error and "Invalid input for the mcp__up__add tool" in text_of(invalid)
    assert "'b' is a required property" in text_of(invalid)
    big = daemon.execute("mcp__up__big", {"size": 300_000})
    assert len(text_of(big)) <= 50_000 and "y" * 1000 in text_of(big)
    audit = [line for line in daemon.audit_lines() if line.get("tool") == "mcp__up__add"]
    assert [line["outcome"] for line in audit] == ["allow", "not_evaluated"]


@pytest.mark.parametrize("server", ["up", "upjson"])
def test_an_answer_past_the_message_limit_fails_that_call_only(
    world: tuple[RunningDaemon, Upstream], server: str
) -> None:
    """The SDK reads a JSON answer whole (and an SSE event up to a limit): neither may make the
    daemon hold more than 16 MiB of one answer."""
    daemon, _ = world
    flood = daemon.execute(f"mcp__{server}__big", {"size": 40_000_000})
    assert flood.result.is_error and f"MCP server {server}" in text_of(flood), text_of(flood)
    assert text_of(daemon.execute(f"mcp__{server}__add", {"a": 3, "b": 4})) == "7"


def test_a_servers_progress_reaches_the_stream(world: tuple[RunningDaemon, Upstream]) -> None:
    messages = progress_messages(world[0], "mcp__up__steps", {"n": 3})
    assert messages == ["step: 1/3", "step: 2/3", "step: 3/3"]


def test_the_policy_asks_and_denies_mcp_tools_like_any_other(
    world: tuple[RunningDaemon, Upstream],
) -> None:
    daemon, _ = world
    asked = daemon.execute("mcp__up__shout", {"text": "hi"}, tool_use_id="toolu_shout_1")
    assert asked.decision.outcome == pb.ASK and asked.decision.approval_token
    assert "needs a person's approval" in text_of(asked)
    # The Unix socket's caller approves its own call by sending the token back (policy).
    approved = daemon.execute(
        "mcp__up__shout",
        {"text": "hi"},
        tool_use_id="toolu_shout_1",
        approval_token=asked.decision.approval_token,
    )
    assert approved.decision.outcome == pb.ALLOW and text_of(approved) == "HI"


def test_list_changed_adds_the_new_tool(world: tuple[RunningDaemon, Upstream]) -> None:
    daemon, _ = world
    grown = daemon.execute("mcp__up__grow", {"name": "late_tool"})
    assert not grown.result.is_error, text_of(grown)
    _wait_for(daemon, "mcp__up__late_tool")
    assert text_of(daemon.execute("mcp__up__late_tool", {})) == "late_tool here"


def test_a_hanging_call_fails_at_the_deadline_naming_the_server(
    world: tuple[RunningDaemon, Upstream],
) -> None:
    daemon, _ = world
    hung = daemon.execute("mcp__up__sleep", {"seconds": 30})
    assert hung.result.is_error
    assert "The MCP server up did not answer sleep within 3 s" in text_of(hung)
    assert _answer_soon(daemon, "mcp__up__add", {"a": 1, "b": 1}) == "2"


def test_an_abandoned_call_leaves_no_stream_for_the_server_to_flood(short_tmp: Path) -> None:
    """The SDK does not end an abandoned request's event stream: the daemon reconnects instead,
    so a server that goes on sending after the deadline is cut off."""
    flooder = Flooder()
    server = {"name": "flooder", "url": f"http://127.0.0.1:{flooder.port}/mcp", "timeout_s": 2,
              "defer": "never"}  # fmt: skip
    try:
        with running_daemon(
            short_tmp / "ws-mcp-up",
            short_tmp / "mcp-flood.sock",
            sandbox={"enabled": False},
            opa={"policies_dir": _policies(short_tmp / "mcp-flood", ("flooder",))},
            mcp_servers=[server],
        ) as daemon:
            _wait_for(daemon, "mcp__flooder__flood")
            flood = daemon.execute("mcp__flooder__flood", {})
            assert flood.result.is_error and "within 2 s" in text_of(flood), text_of(flood)
            deadline = time.monotonic() + 10
            while flooder.cut() == 0 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert flooder.cut() == 1, "the stream of an abandoned call is still open"
    finally:
        flooder.stop()


def _answer_soon(daemon: RunningDaemon, name: str, tool_input: dict[str, object]) -> str:
    """The call's text once the server is (re)connected."""
    deadline = time.monotonic() + 30
    while True:
        answered = daemon.execute(name, tool_input)
        if not answered.result.is_error or time.monotonic() > deadline:
            assert not answered.result.is_error, text_of(answered)
            return text_of(answered)
        time.sleep(0.2)


def test_a_crash_mid_call_is_an_error_and_the_server_is_reconnected(
    world: tuple[RunningDaemon, Upstream],
) -> None:
    daemon, upstream = world
    died = daemon.execute("mcp__up__die", {})
    assert died.result.is_error and "MCP server up" in text_of(died), text_of(died)
    down = daemon.execute("mcp__up__add", {"a": 1, "b": 2})
    assert down.result.is_error and "MCP server up" in text_of(down)
    upstream.start()
    deadline = time.monotonic() + 90
    while True:
        again = daemon.execute("mcp__up__add", {"a": 1, "b": 2})
        if not again.result.is_error or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert text_of(again) == "3", text_of(again)
    assert base64.b64encode(PNG)  # the picture survives restarts too
    assert daemon.execute("mcp__up__picture", {}).result.content[0].image.data == PNG


async def test_an_mcp_client_reaches_the_upstream_through_tooljail_mcp(
    world: tuple[RunningDaemon, Upstream],
) -> None:
    """tooljail as a policy-enforcing MCP gateway: client -> `tooljail mcp` -> daemon ->
    upstream server, and the policy's ask stops a call on the way."""
    daemon, _ = world
    async with bridge(daemon.target) as session:
        listed = {tool.name for tool in (await session.list_tools()).tools}
        added = await session.call_tool("mcp__up__add", {"a": 20, "b": 22})
        shouted = await session.call_tool("mcp__up__shout", {"text": "hi"})
    assert {"mcp__up__add", "mcp__up__shout", "Read"} <= listed
    assert not added.is_error and bridge_text(added) == "42"
    assert shouted.is_error and "approval" in bridge_text(shouted)


def progress_messages(daemon: RunningDaemon, name: str, tool_input: dict[str, object]) -> list[str]:
    """The progress messages of one ExecuteStream call (which must succeed)."""
    tool_use = pb.ToolUse(id=f"toolu_progress_{time.monotonic_ns()}", name=name)
    tool_use.input.update(tool_input)
    messages, answered = [], None
    for event in daemon.stub.ExecuteStream(pb.ExecuteRequest(tool_use=tool_use), timeout=120):
        if event.HasField("progress"):
            messages.append(event.progress.message)
        else:
            answered = event.response
    assert answered is not None and not answered.result.is_error, answered
    return messages
