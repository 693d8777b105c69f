"""What a refused request held goes with its call (attacker round 166): the exception that ended
the call kept the frames that held the request, grpc kept that exception with the call's state
for a while, and the cycles among them waited for a full garbage collection. A caller sending
16 MiB requests that were refused got the daemon killed at its memory limit within seconds.

The daemon runs as its own process here: its resident memory is what is measured."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf.internal.encoder import _VarintBytes
from grpc_health.v1 import health_pb2

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from tests.integration.harness import serve_process, wait_serving

pytestmark = pytest.mark.integration

REQUEST_BYTES = 12 << 20
CALLS = 24
#: What the daemon may keep after all of them: far under one request in four.
GROWTH_LIMIT = CALLS * REQUEST_BYTES // 4


def _rss(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0]) * 1024


def unknown_field(size: int) -> bytes:
    """A field number no message of tooljail's has (15), `size` bytes long: kept as unknown."""
    return bytes([15 << 3 | 2]) + _VarintBytes(size) + b"u" * size


@pytest.fixture(scope="module")
def daemon_process(short_tmp: Path) -> Iterator[tuple[str, int]]:
    workspace = short_tmp / "ws-refused-memory"
    workspace.mkdir()
    socket_path = short_tmp / "refused-memory.sock"
    env = dict(
        os.environ,
        TOOLJAIL_SANDBOX__ENABLED="false",
        TOOLJAIL_AUDIT_LOG="/dev/null",
        TOOLJAIL_STATE_DIR=str(short_tmp / "refused-memory-state"),
    )
    argv = [sys.executable, "-m", "daemon.cli", "serve", "--listen", f"unix://{socket_path}"]
    argv += ["--workspace", str(workspace)]
    log = short_tmp / "refused-memory.log"
    process: subprocess.Popen[str]
    with serve_process(argv, env, socket_path, log) as process:
        target = f"unix:{socket_path}"
        wait_serving(target)
        yield target, process.pid


def _refused_body(method: str) -> bytes:
    if method == "/tooljail.v1.Admin/Status":  # the socket's principal is no admin here
        return unknown_field(REQUEST_BYTES)
    if method == "/tooljail.v1.Executor/ListTools":
        return pb.ListToolsRequest(session_id="s" * REQUEST_BYTES).SerializeToString()
    if method == "/tooljail.v1.Executor/Execute":
        use = pb.ToolUse(id="toolu_refused_memory", name="NoSuchTool")
        return pb.ExecuteRequest(tool_use=use).SerializeToString() + unknown_field(REQUEST_BYTES)
    return health_pb2.HealthCheckRequest(service="x" * REQUEST_BYTES).SerializeToString()


@pytest.mark.parametrize(
    "method",
    [
        "/tooljail.v1.Admin/Status",
        "/tooljail.v1.Executor/ListTools",
        "/tooljail.v1.Executor/Execute",
        "/grpc.health.v1.Health/Check",
    ],
)
def test_refused_requests_are_not_kept(daemon_process: tuple[str, int], method: str) -> None:
    target, pid = daemon_process
    body = _refused_body(method)
    options = [("grpc.max_send_message_length", 64 << 20)]
    with grpc.insecure_channel(target, options=options) as channel:
        call = channel.unary_unary(method)  # bytes in, bytes out
        before = _rss(pid)
        codes = set()
        for _ in range(CALLS):
            try:
                call(body, timeout=60)
                codes.add(grpc.StatusCode.OK)
            except grpc.RpcError as refused:
                codes.add(refused.code())
        grown = _rss(pid) - before
    if method != "/tooljail.v1.Executor/Execute":  # there: an is_error result, no tool so named
        assert grpc.StatusCode.OK not in codes, codes
    assert grown < GROWTH_LIMIT, f"{grown >> 20} MiB kept after {CALLS} refused calls ({codes})"
