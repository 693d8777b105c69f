"""The `mcp` benchmark part: one tool of an upstream MCP server called through tooljail
(Execute of mcp__bench__echo: the daemon's gate, then the daemon's MCP client) against the same
server called directly with the `mcp` SDK's client, the two taken in turns in the same run.

The daemon is `tooljail serve` in its own process with its managed OPA and a copy of the shipped
policy that lists the server for the Unix socket's principal; the upstream runs in a process of
its own (bench/mcp_upstream.py).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
from mcp.client import Client

from bench.processes import TOOLJAIL
from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon._generated.tooljail.v1 import executor_pb2_grpc as pb_grpc
from daemon.config import PROJECT_ROOT

TOOL = "mcp__bench__echo"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_port(port: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError("the upstream MCP server did not start")


@contextmanager
def _process(argv: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=out, stdin=subprocess.DEVNULL)
    try:
        yield process
    finally:
        process.terminate()
        process.wait(30)


def _daemon_config(work: Path, url: str) -> Path:
    policies = work / "policies"
    shutil.rmtree(policies, ignore_errors=True)
    shutil.copytree(PROJECT_ROOT / "policies", policies)
    data = json.loads((policies / "data.json").read_text())
    data["tooljail"]["principals"]["local"] = {"mcp_servers": ["bench"]}
    (policies / "data.json").write_text(json.dumps(data))
    config = work / "tooljail.toml"
    config.write_text(
        f'state_dir = "{work / "state"}"\naudit_log = "{work / "audit.jsonl"}"\n'
        f'[opa]\npolicies_dir = "{policies}"\n[sandbox]\nenabled = false\n'
        '[logging]\nlevel = "warning"\n'
        f'[[mcp_servers]]\nname = "bench"\nurl = "{url}"\ndefer = "never"\n'
    )
    return config


def _execute(stub: pb_grpc.ExecutorStub, text: str) -> float:
    tool_use = pb.ToolUse(id=f"toolu_{uuid.uuid4().hex[:16]}", name=TOOL)
    tool_use.input.update({"text": text})
    started = time.perf_counter()
    answer = stub.Execute(pb.ExecuteRequest(tool_use=tool_use), timeout=60)
    took = (time.perf_counter() - started) * 1000
    if answer.result.is_error:
        raise RuntimeError(f"{TOOL} failed: {answer.result.content[0].text.text[:300]}")
    return took


async def _direct(url: str, calls: int, through: Any) -> tuple[list[float], list[float]]:
    direct: list[float] = []
    proxied: list[float] = []
    async with Client(url, mode="legacy", cache=None) as client:
        for i in range(calls):
            started = time.perf_counter()
            result = await client.call_tool("echo", {"text": f"call {i}"})
            direct.append((time.perf_counter() - started) * 1000)
            if result.is_error:
                raise RuntimeError("the direct call failed")
            proxied.append(await asyncio.to_thread(through, f"call {i}"))
    return direct, proxied


def _wait_listed(stub: pb_grpc.ExecutorStub, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        listed = stub.ListTools(pb.ListToolsRequest(), timeout=10)
        if any(tool.name == TOOL for tool in listed.tools):
            return
        time.sleep(0.2)
    raise RuntimeError(f"{TOOL} was never listed")


def _quantiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50_ms": statistics.median(ordered),
        "p99_ms": ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))],
    }


def measure_mcp(work: Path, calls: int) -> dict[str, Any]:
    """p50 and p99 of the same MCP tool call, directly and through tooljail (taken in turns;
    the direct calls' time includes their own client's work, as the daemon's does)."""
    work.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    socket_path = work / "d.sock"
    upstream_argv = [sys.executable, "-m", "bench.mcp_upstream", str(port)]
    with _process(upstream_argv, work / "upstream.log"):
        _wait_port(port)
        config = _daemon_config(work, url)
        workspace = work / "ws"
        workspace.mkdir(exist_ok=True)
        serve = [str(TOOLJAIL), "serve", "--config", str(config), "--listen",
                 f"unix://{socket_path}", "--workspace", str(workspace)]  # fmt: skip
        with _process(serve, work / "daemon.log"):
            deadline = time.monotonic() + 60
            while not socket_path.exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            with grpc.insecure_channel(f"unix:{socket_path}") as channel:
                stub = pb_grpc.ExecutorStub(channel)
                _wait_listed(stub)
                for _ in range(min(20, calls)):  # warm both paths
                    _execute(stub, "warm")
                direct, through = asyncio.run(_direct(url, calls, lambda t: _execute(stub, t)))
    d, t = _quantiles(direct), _quantiles(through)
    return {
        "calls": calls,
        "direct_p50_ms": d["p50_ms"],
        "direct_p99_ms": d["p99_ms"],
        "tooljail_p50_ms": t["p50_ms"],
        "tooljail_p99_ms": t["p99_ms"],
        "errors": 0,
    }
