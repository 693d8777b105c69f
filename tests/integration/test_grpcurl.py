"""grpcurl against a live daemon through server reflection alone: no .proto file in reach."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any, Protocol

import pytest

from tests.integration.harness import RunningDaemon

# The first test may build grpcurl (`make grpcurl`: about a minute with a warm Go module cache).
pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

REPO_ROOT = Path(__file__).resolve().parents[2]
GRPCURL = REPO_ROOT / ".tools" / "bin" / "grpcurl"
# grpcurl exits with 64 + N when the call failed with gRPC status code N.
RPC_ERROR_EXIT_BASE = 64
INVALID_ARGUMENT = 3


class Grpcurl(Protocol):
    def __call__(
        self, *command: str, data: dict[str, Any] | None = None
    ) -> subprocess.CompletedProcess[str]: ...


@pytest.fixture(scope="module")
def grpcurl() -> Path:
    """The grpcurl binary, built by the Makefile's `grpcurl` target when it is missing."""
    if not GRPCURL.exists():
        built = subprocess.run(
            ["make", "-s", "grpcurl"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=280,
            check=False,
        )
        if built.returncode != 0:
            pytest.fail(f"`make grpcurl` failed:\n{built.stdout}\n{built.stderr}")
    return GRPCURL


@pytest.fixture
def call(grpcurl: Path, host_daemon: RunningDaemon, tmp_path: Path) -> Grpcurl:
    """`call(*command, data=None)`: grpcurl over the daemon's Unix socket, plaintext.

    It runs in an empty folder and is given no -proto or -import-path: all it knows of the schema
    comes from the server's reflection service.
    """
    socket_path = host_daemon.target.removeprefix("unix:")

    def run(*command: str, data: dict[str, Any] | None = None) -> subprocess.CompletedProcess[str]:
        flags = ["-plaintext", "-unix", "-max-time", "60", "-emit-defaults"]
        if data is not None:
            flags += ["-d", json.dumps(data)]
        return subprocess.run(
            [str(grpcurl), *flags, socket_path, *command],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )

    return run


def test_list_names_every_service(call: Grpcurl) -> None:
    listed = call("list")
    assert listed.returncode == 0, listed.stderr
    services = set(listed.stdout.split())
    assert {"tooljail.v1.Executor", "grpc.health.v1.Health"} <= services
    assert any(s.startswith("grpc.reflection.") for s in services), services


def test_describe_shows_the_executor_contract(call: Grpcurl) -> None:
    described = call("describe", "tooljail.v1.Executor")
    assert described.returncode == 0, described.stderr
    text = described.stdout
    assert "service Executor {" in text
    for rpc in (
        "rpc ListTools ( .tooljail.v1.ListToolsRequest ) "
        "returns ( .tooljail.v1.ListToolsResponse );",
        "rpc Execute ( .tooljail.v1.ExecuteRequest ) returns ( .tooljail.v1.ExecuteResponse );",
        "rpc ExecuteBatch ( .tooljail.v1.ExecuteBatchRequest ) "
        "returns ( stream .tooljail.v1.ExecuteResponse );",
        "rpc OpenSession ( .tooljail.v1.OpenSessionRequest ) returns ( .tooljail.v1.Session );",
    ):
        assert rpc in text, text
    # Messages resolve too, down to the well-known types they import.
    tool_use = call("describe", "tooljail.v1.ToolUse")
    assert tool_use.returncode == 0, tool_use.stderr
    assert ".google.protobuf.Struct input = 3;" in tool_use.stdout


def test_execute_with_a_json_body_reads_a_file(call: Grpcurl, workdir: Path) -> None:
    note = workdir / "note.txt"
    note.write_text("written for grpcurl\nsecond line\n")
    body = {
        "tool_use": {"id": "toolu_grpcurl_read", "name": "Read", "input": {"file_path": str(note)}}
    }

    executed = call("tooljail.v1.Executor/Execute", data=body)

    assert executed.returncode == 0, executed.stderr
    response = json.loads(executed.stdout)
    assert response["decision"]["outcome"] == "ALLOW"
    result = response["result"]
    assert result["tool_use_id"] == "toolu_grpcurl_read"
    assert result["is_error"] is False
    assert "written for grpcurl" in result["content"][0]["text"]["text"]
    # The same result as the Anthropic block a caller sends back to the Messages API.
    block = json.loads(response["tool_result_json"])
    assert block["type"] == "tool_result" and block["tool_use_id"] == "toolu_grpcurl_read"
    assert "second line" in block["content"][0]["text"]


def test_execute_outside_the_workspace_is_denied(call: Grpcurl) -> None:
    body = {
        "tool_use": {
            "id": "toolu_grpcurl_deny",
            "name": "Read",
            "input": {"file_path": "/etc/passwd"},
        }
    }

    executed = call("tooljail.v1.Executor/Execute", data=body)

    # A refusal is an answer for the model (an is_error tool_result), not a failed call.
    assert executed.returncode == 0, executed.stderr
    response = json.loads(executed.stdout)
    assert response["decision"]["outcome"] == "DENY"
    assert response["result"]["is_error"] is True
    assert "root:" not in executed.stdout


def test_a_request_without_a_tool_use_is_an_invalid_argument_status(call: Grpcurl) -> None:
    executed = call("tooljail.v1.Executor/Execute", data={})

    assert executed.returncode == RPC_ERROR_EXIT_BASE + INVALID_ARGUMENT, executed.stdout
    assert "InvalidArgument" in executed.stderr
    assert "tool_use" in executed.stderr


@pytest.mark.parametrize("service", ["", "tooljail.v1.Executor"])
def test_health_check_reports_serving(call: Grpcurl, service: str) -> None:
    checked = call("grpc.health.v1.Health/Check", data={"service": service})

    assert checked.returncode == 0, checked.stderr
    assert json.loads(checked.stdout) == {"status": "SERVING"}
