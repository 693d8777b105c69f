"""The Python client's own logic, without a daemon: where it connects, how RPC failures map to
its exceptions, how tool_use blocks are read (dicts and SDK-like objects), and that a retried
Execute keeps its tool_use id (the daemon then runs it once)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
import pytest

# The client is not installed in the daemon's virtualenv: it is imported from its source.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "clients" / "python" / "src"))

import tooljail
from tooljail import errors
from tooljail.anthropic import tool_use_blocks
from tooljail.connection import Connection
from tooljail.requests import tool_uses


def test_arguments_win_over_the_environment_which_wins_over_the_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TOOLJAIL_TARGET", raising=False)
    monkeypatch.delenv("TOOLJAIL_TOKEN", raising=False)
    assert Connection.resolve().target == "unix:///run/tooljail/tooljail.sock"
    monkeypatch.setenv("TOOLJAIL_TARGET", "127.0.0.1:50051")
    monkeypatch.setenv("TOOLJAIL_TOKEN", "s3cret")
    from_env = Connection.resolve()
    assert from_env.target == "127.0.0.1:50051"
    assert from_env.token == "s3cret"
    given = Connection.resolve("unix:///tmp/x.sock", token="")
    assert given.grpc_target == "unix:///tmp/x.sock" and given.token == ""
    assert Connection.resolve("unix://relative.sock").grpc_target == "unix:relative.sock"
    with pytest.raises(ValueError, match="both cert_file and key_file"):
        Connection.resolve("h:1", cert_file="c.pem")


class _Failed(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (grpc.StatusCode.NOT_FOUND, errors.NotFound),
        (grpc.StatusCode.UNAVAILABLE, errors.Unavailable),
        (grpc.StatusCode.UNAUTHENTICATED, errors.Unauthenticated),
        (grpc.StatusCode.PERMISSION_DENIED, errors.PermissionDenied),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, errors.ResourceExhausted),
        (grpc.StatusCode.INVALID_ARGUMENT, errors.InvalidArgument),
        (grpc.StatusCode.DEADLINE_EXCEEDED, errors.DeadlineExceeded),
        (grpc.StatusCode.INTERNAL, errors.TooljailError),
    ],
)
def test_statuses_map_to_exceptions(code: grpc.StatusCode, expected: type[Exception]) -> None:
    mapped = errors.from_rpc_error(_Failed(code, "what went wrong"))
    assert type(mapped) is expected and str(mapped) == "what went wrong"
    assert mapped.code is code


def test_tool_use_blocks_from_dicts_and_sdk_objects() -> None:
    sdk_block = SimpleNamespace(
        type="tool_use", id="toolu_2", name="Read", input={"file_path": "/a"}
    )
    message = {
        "content": [
            {"type": "text", "text": "hi"},
            {"type": "tool_use", "id": "toolu_1", "name": "LS", "input": {}},
            sdk_block,
        ]
    }
    blocks = tool_use_blocks(message)
    assert len(blocks) == 2
    uses = tool_uses(blocks)
    assert [(u.id, u.name) for u in uses] == [("toolu_1", "LS"), ("toolu_2", "Read")]
    assert dict(uses[1].input) == {"file_path": "/a"}
    assert tool_use_blocks(SimpleNamespace(content="just text")) == []
    fresh = tool_uses([{"name": "LS", "input": {"path": "/"}}])[0]
    assert fresh.id.startswith("toolu_")


def test_a_retried_execute_keeps_its_tool_use_id(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tooljail.client, "RETRY_PAUSE_S", 0.0)
    seen: list[str] = []

    def execute(request: Any, **_: Any) -> Any:
        seen.append(request.tool_use.id)
        if len(seen) < 3:
            raise _Failed(grpc.StatusCode.UNAVAILABLE, "daemon restarting")
        from tooljail._proto.tooljail.v1 import executor_pb2 as pb

        return pb.ExecuteResponse(result=pb.ToolResult(tool_use_id=request.tool_use.id))

    client = tooljail.Client("unix:///nonexistent.sock")
    try:
        client._executor = SimpleNamespace(Execute=execute)  # type: ignore[assignment]
        answer = client.execute("Read", {"file_path": "/a"}, tool_use_id="toolu_same")
    finally:
        client.close()
    assert seen == ["toolu_same"] * 3 and answer.tool_use_id == "toolu_same"


def test_an_execute_that_never_reaches_the_daemon_raises_unavailable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tooljail.client, "RETRY_PAUSE_S", 0.0)

    def execute(request: Any, **_: Any) -> Any:
        raise _Failed(grpc.StatusCode.UNAVAILABLE, "connection refused")

    client = tooljail.Client("unix:///nonexistent.sock")
    try:
        client._executor = SimpleNamespace(Execute=execute)  # type: ignore[assignment]
        with pytest.raises(tooljail.Unavailable, match="connection refused"):
            client.execute("Read", {})
    finally:
        client.close()


@pytest.mark.parametrize("retries", [0, 4])
def test_retries_bound_the_attempts(monkeypatch: pytest.MonkeyPatch, retries: int) -> None:
    monkeypatch.setattr(tooljail.client, "RETRY_PAUSE_S", 0.0)
    attempts: list[str] = []

    def execute(request: Any, **_: Any) -> Any:
        attempts.append(request.tool_use.id)
        raise _Failed(grpc.StatusCode.UNAVAILABLE, "connection refused")

    client = tooljail.Client("unix:///nonexistent.sock", retries=retries)
    try:
        client._executor = SimpleNamespace(Execute=execute)  # type: ignore[assignment]
        with pytest.raises(tooljail.Unavailable):
            client.execute("Read", {}, tool_use_id="toolu_bounded")
    finally:
        client.close()
    assert attempts == ["toolu_bounded"] * (retries + 1)


def test_negative_retries_are_refused() -> None:
    with pytest.raises(ValueError, match="retries must be 0 or more"):
        tooljail.Client("unix:///nonexistent.sock", retries=-1)


def test_the_token_never_shows_in_a_connections_repr() -> None:
    connection = Connection.resolve("unix:///tmp/x.sock", token="s3cret-token")
    assert "s3cret-token" not in repr(connection) and "s3cret-token" not in str(connection)
    client = tooljail.Client("unix:///tmp/x.sock", token="s3cret-token")
    try:
        assert "s3cret-token" not in repr(client.connection)
    finally:
        client.close()


@pytest.mark.parametrize(
    "target", ["daemon.example.org:50051", "10.0.0.5:50051", "dns:///daemon.example.org:443"]
)
def test_a_token_is_never_sent_in_clear_off_this_machine(target: str) -> None:
    with pytest.raises(ValueError, match="in clear"):
        Connection.resolve(target, token="s3cret-token")
    Connection.resolve(target, token="s3cret-token", ca_file="ca.pem")  # over TLS: fine
    Connection.resolve(target, token="")  # no token: nothing to leak


@pytest.mark.parametrize(
    "target", ["127.0.0.1:50051", "localhost:50051", "[::1]:50051", "unix:///run/t.sock"]
)
def test_a_token_may_go_in_clear_on_loopback_and_unix_sockets(target: str) -> None:
    assert Connection.resolve(target, token="s3cret-token").token == "s3cret-token"


def test_an_empty_tls_file_name_is_an_error_not_plaintext() -> None:
    with pytest.raises(ValueError, match="ca_file"):
        Connection.resolve("127.0.0.1:1", ca_file="")
