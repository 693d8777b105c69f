"""A TCP listener bounds what a caller without credentials can make the daemon hold (attacker
round 163): a call without a valid token is refused before its request is read, a connection
may open only so many streams, the listener only so many connections (the Unix socket serving on
meanwhile), and connections that call nothing are closed."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon._generated.tooljail.v1 import executor_pb2_grpc as pb_grpc
from daemon.server.health_checks import MAX_WATCHES_PER_PRINCIPAL
from daemon.server.receipts import SMALL_MESSAGE_BYTES
from tests.integration.harness import RunningDaemon, running_daemon, text_of
from tests.integration.raw_http2 import (
    DATA,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADERS,
    SETTINGS,
    SETTINGS_INITIAL_WINDOW_SIZE,
    SETTINGS_MAX_CONCURRENT_STREAMS,
    RawConnection,
    ended,
    frame,
    message_prefix,
    request_headers,
)
from tests.integration.test_refused_requests_memory import unknown_field
from tests.integration.test_service import free_port

pytestmark = pytest.mark.integration

TOKEN = "listener-bounds-token-51c7"
MAX_CONNECTIONS = 4
MAX_STREAMS = 16
HEALTH_CHECK = "/grpc.health.v1.Health/Check"
SERVING_REPLY = message_prefix(2) + b"\x08\x01"  # HealthCheckResponse(status=SERVING)


def _tcp_daemon(short_tmp: Path, name: str, **tcp: object) -> Iterator[tuple[RunningDaemon, str]]:
    workspace = short_tmp / f"ws-{name}"
    workspace.mkdir()
    target = f"127.0.0.1:{free_port()}"
    with running_daemon(
        workspace,
        short_tmp / f"{name}.sock",
        sandbox={"enabled": False},
        tcp={"address": target, **tcp},
        auth={"tokens": {"bounds-user": TOKEN}},
        workspaces={"tenant_defaults": "shared"},
    ) as daemon:
        yield daemon, target


@pytest.fixture(scope="module")
def bounded(short_tmp: Path) -> Iterator[tuple[RunningDaemon, str]]:
    yield from _tcp_daemon(
        short_tmp,
        "bounds",
        max_connections=MAX_CONNECTIONS,
        max_streams_per_connection=MAX_STREAMS,
    )


def _health(target: str, token: str | None) -> health_pb2.HealthCheckResponse:
    metadata = (("authorization", f"Bearer {token}"),) if token else None
    with grpc.insecure_channel(target) as channel:
        reply: health_pb2.HealthCheckResponse = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=30, metadata=metadata
        )
        return reply


@pytest.mark.parametrize(
    "path",
    [
        "/tooljail.v1.Executor/Execute",
        "/tooljail.v1.Executor/ExecuteTurn",
        "/tooljail.v1.Admin/Status",
        HEALTH_CHECK,
        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
    ],
)
@pytest.mark.parametrize("token", [None, "not-the-token"], ids=["no token", "wrong token"])
def test_a_call_without_a_valid_token_is_refused_before_its_message_is_read(
    bounded: tuple[RunningDaemon, str], path: str, token: str | None
) -> None:
    _, target = bounded
    connection = RawConnection(target)
    try:
        connection.settings()
        # A message announced at 1 MiB and left unfinished: read, it would be held until done.
        connection.send(frame(HEADERS, END_HEADERS, 1, request_headers(path, token)))
        connection.send(frame(DATA, 0, 1, message_prefix(1 << 20) + b"x" * 4096))
        assert ended(connection.frames_of(1, timeout_s=60)), "the stream waited for its message"
        # The same connection with the token: the frames above were well formed.
        connection.send(frame(HEADERS, END_HEADERS, 3, request_headers(HEALTH_CHECK, TOKEN)))
        connection.send(frame(DATA, END_STREAM, 3, message_prefix(0)))
        answer = connection.frames_of(3, timeout_s=60)
        assert [f.payload for f in answer if f.kind == DATA] == [SERVING_REPLY]
    finally:
        connection.close()


def test_the_refusal_says_what_the_caller_must_send(bounded: tuple[RunningDaemon, str]) -> None:
    _, target = bounded
    with pytest.raises(grpc.RpcError) as refused:
        _health(target, None)
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "bearer token" in (refused.value.details() or "")
    assert _health(target, TOKEN).status == health_pb2.HealthCheckResponse.SERVING


def test_a_connection_may_open_only_so_many_streams(bounded: tuple[RunningDaemon, str]) -> None:
    _, target = bounded
    connection = RawConnection(target)
    try:
        assert connection.settings()[SETTINGS_MAX_CONCURRENT_STREAMS] == MAX_STREAMS
    finally:
        connection.close()


def test_refused_calls_do_not_grow_what_a_connection_may_send_unread(
    bounded: tuple[RunningDaemon, str],
) -> None:
    """grpc's BDP probing grew the windows of a connection whose calls were all refused to 64
    MiB, each stream's data taken in before its refusal (attacker round 165)."""
    _, target = bounded
    connection = RawConnection(target)
    try:
        assert connection.settings()[SETTINGS_INITIAL_WINDOW_SIZE] <= 65535
        windows: list[int] = []
        for stream in range(1, 2 * MAX_STREAMS * 8, 2):
            connection.send(frame(HEADERS, END_HEADERS, stream, request_headers(HEALTH_CHECK)))
            connection.send(frame(DATA, 0, stream, message_prefix(1 << 20) + b"x" * 16000))
            while (got := connection.next_frame(timeout_s=0.01)) is not None:
                if got.kind == SETTINGS and got.payload:
                    windows += _window_settings(got.payload)
        deadline = time.monotonic() + 5
        while (got := connection.next_frame(max(0.01, deadline - time.monotonic()))) is not None:
            if got.kind == SETTINGS and got.payload:
                windows += _window_settings(got.payload)
        assert all(window <= 65535 for window in windows), windows
    finally:
        connection.close()


def _window_settings(payload: bytes) -> list[int]:
    return [
        int.from_bytes(payload[i + 2 : i + 6])
        for i in range(0, len(payload), 6)
        if int.from_bytes(payload[i : i + 2]) == SETTINGS_INITIAL_WINDOW_SIZE
    ]


def test_the_listener_takes_only_so_many_connections_and_the_unix_socket_serves_on(
    bounded: tuple[RunningDaemon, str],
) -> None:
    daemon, target = bounded
    held: list[RawConnection] = []
    refused = False
    try:
        # Connections of the tests before may not have been noticed as closed yet: those still
        # count, so fewer than the bound may be taken here, never more.
        while not refused and len(held) <= MAX_CONNECTIONS:
            connection = RawConnection(target)
            try:
                connection.settings()
                held.append(connection)
            except (EOFError, ConnectionError):
                connection.close()
                refused = True
        assert refused and len(held) <= MAX_CONNECTIONS
        with grpc.insecure_channel(daemon.target) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=30
            )
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        for connection in held:
            connection.close()
    # Their room is given back: a caller gets in again (the server notices the closes first).
    deadline = time.monotonic() + 60
    while True:
        try:
            assert _health(target, TOKEN).status == health_pb2.HealthCheckResponse.SERVING
            return
        except grpc.RpcError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_a_connection_that_calls_nothing_is_closed(short_tmp: Path) -> None:
    for _, target in _tcp_daemon(short_tmp, "idle", idle_connection_timeout_s=1.0):
        idle = RawConnection(target)
        try:
            idle.settings()
            kinds = []
            with pytest.raises(EOFError):
                while (got := idle.next_frame(timeout_s=60)) is not None:
                    kinds.append(got.kind)
            assert GOAWAY in kinds
        finally:
            idle.close()


def test_a_connection_that_never_finishes_its_handshake_is_closed(short_tmp: Path) -> None:
    for _, target in _tcp_daemon(short_tmp, "handshake", handshake_timeout_s=1.0):
        host, _, port = target.rpartition(":")
        with socket.create_connection((host, int(port)), timeout=60) as silent:
            silent.settimeout(60)
            while silent.recv(4096):
                pass  # the server's SETTINGS, then its end once the handshake timed out


BOB_TOKEN = "listener-bounds-bob-83d2"
RECEIPT_TURNS = 4


@pytest.fixture(scope="module")
def two_tenants(short_tmp: Path) -> Iterator[tuple[RunningDaemon, str]]:
    workspace = short_tmp / "ws-receipts"
    workspace.mkdir()
    (workspace / "a.txt").write_text("alpha\n")
    target = f"127.0.0.1:{free_port()}"
    with running_daemon(
        workspace,
        short_tmp / "receipts.sock",
        sandbox={"enabled": False},
        tcp={"address": target},
        auth={"tokens": {"alice": TOKEN, "bob": BOB_TOKEN}},
        workspaces={"tenant_defaults": "shared"},
        max_request_bytes=1 << 20,
        max_held_request_bytes=RECEIPT_TURNS << 20,
        request_receive_timeout_s=2.0,
    ) as daemon:
        yield daemon, target


def _read_over_tcp(target: str, token: str, workspace: Path) -> pb.ExecuteResponse:
    use = pb.ToolUse(id="toolu_receipts", name="Read")
    use.input.update({"file_path": str(workspace / "a.txt")})
    with grpc.insecure_channel(target) as channel:
        reply: pb.ExecuteResponse = pb_grpc.ExecutorStub(channel).Execute(
            pb.ExecuteRequest(tool_use=use),
            timeout=60,
            metadata=(("authorization", f"Bearer {token}"),),
        )
        return reply


def test_requests_left_unfinished_by_one_tenant_are_bounded_and_ended(
    two_tenants: tuple[RunningDaemon, str],
) -> None:
    """A caller with a token announced 16 MiB messages on many streams and left each one byte
    short: grpc held every byte, with no end (attacker round 165). Now only so many of one
    principal's requests are read at once, the others wait, and each must arrive whole in time:
    every such call ends, and another tenant is served meanwhile."""
    daemon, target = two_tenants
    connection = RawConnection(target)
    streams = range(1, 2 * (2 * RECEIPT_TURNS) + 1, 2)
    try:
        connection.settings()
        for stream in streams:
            headers = request_headers("/tooljail.v1.Executor/Execute", BOB_TOKEN)
            connection.send(frame(HEADERS, END_HEADERS, stream, headers))
            # within the connection's window (64 KiB): nothing is read of these yet
            connection.send(frame(DATA, 0, stream, message_prefix(1 << 20) + b"\x0a" * 4000))
        reply = _read_over_tcp(target, TOKEN, daemon.workspace)
        assert "alpha" in text_of(reply) and not reply.result.is_error
        endings = {}
        deadline = time.monotonic() + 120
        while len(endings) < len(streams) and time.monotonic() < deadline:
            got = connection.next_frame(timeout_s=1)
            if got is not None and got.stream in streams and got.flags & END_STREAM:
                endings[got.stream] = got
        assert sorted(endings) == list(streams)
        assert all(ended([ending]) for ending in endings.values())
    finally:
        connection.close()
    assert "alpha" in text_of(_read_over_tcp(target, BOB_TOKEN, daemon.workspace))


def _channel(target: str) -> grpc.Channel:
    return grpc.insecure_channel(target, options=[("grpc.max_send_message_length", 64 << 20)])


BOB = (("authorization", f"Bearer {BOB_TOKEN}"),)
ALICE = (("authorization", f"Bearer {TOKEN}"),)


def test_health_watch_streams_are_bounded_per_principal_and_take_only_short_names(
    two_tenants: tuple[RunningDaemon, str],
) -> None:
    """Each Watch stream held its 16 MiB service name for as long as it stayed open, and one
    principal could open them by the thousand (attacker round 166)."""
    _, target = two_tenants
    with _channel(target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        long_name = health_pb2.HealthCheckRequest(service="x" * 1_000)
        for call in (health.Check, lambda r, **kw: next(iter(health.Watch(r, **kw)))):
            with pytest.raises(grpc.RpcError) as refused:
                call(long_name, timeout=30, metadata=BOB)
            assert refused.value.code() == grpc.StatusCode.NOT_FOUND
        watches = [
            health.Watch(health_pb2.HealthCheckRequest(), timeout=120, metadata=BOB)
            for _ in range(MAX_WATCHES_PER_PRINCIPAL)
        ]
        try:
            for watch in watches:
                assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
            with pytest.raises(grpc.RpcError) as refused:
                next(health.Watch(health_pb2.HealthCheckRequest(), timeout=30, metadata=BOB))
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            # Another principal's are its own.
            alice = health.Watch(health_pb2.HealthCheckRequest(), timeout=30, metadata=ALICE)
            assert next(alice).status == health_pb2.HealthCheckResponse.SERVING
            alice.cancel()
        finally:
            for watch in watches:
                watch.cancel()
        deadline = time.monotonic() + 60
        while True:  # bob's are counted no more once they ended
            try:
                reopened = health.Watch(health_pb2.HealthCheckRequest(), timeout=30, metadata=BOB)
                assert next(reopened).status == health_pb2.HealthCheckResponse.SERVING
                reopened.cancel()
                break
            except grpc.RpcError:
                assert time.monotonic() < deadline
                time.sleep(0.2)


def test_reflection_takes_only_small_messages(two_tenants: tuple[RunningDaemon, str]) -> None:
    """Reflection's answers echo its requests: 16 MiB symbols held 1.3 GiB for one principal
    whose client did not read (attacker round 166)."""
    _, target = two_tenants
    with _channel(target) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)

        def ask(symbol: str) -> reflection_pb2.ServerReflectionResponse:
            request = reflection_pb2.ServerReflectionRequest(file_containing_symbol=symbol)
            return next(iter(stub.ServerReflectionInfo(iter([request]), timeout=30, metadata=BOB)))

        assert ask("tooljail.v1.Executor").file_descriptor_response.file_descriptor_proto
        with pytest.raises(grpc.RpcError) as refused:
            ask("x" * (SMALL_MESSAGE_BYTES + 1))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.parametrize(
    "method",
    ["/tooljail.v1.Executor/OpenSession", "/tooljail.v1.Admin/ReloadPolicies"],
)
def test_a_method_whose_requests_are_not_counted_takes_small_ones_only(
    two_tenants: tuple[RunningDaemon, str], method: str
) -> None:
    """OpenSession with a 16 MiB workspace path held and copied 173 MiB for a second each, and
    padded ReloadPolicies waited on the reload lock holding theirs: a few dozen at once got the
    daemon killed at its memory limit (attacker round 167)."""
    daemon, target = two_tenants
    if method.endswith("OpenSession"):
        body = pb.OpenSessionRequest(workspace="/tmp/" + "a" * 100_000).SerializeToString()
        channel, metadata = _channel(target), BOB
    else:  # the Unix socket's caller, an admin here
        body = unknown_field(100_000)
        channel, metadata = grpc.insecure_channel(daemon.target), None
    with channel:
        with pytest.raises(grpc.RpcError) as refused:
            channel.unary_unary(method)(body, timeout=30, metadata=metadata)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert f"at most {SMALL_MESSAGE_BYTES} bytes" in (refused.value.details() or "")
        listed = pb_grpc.ExecutorStub(channel).ListTools(
            pb.ListToolsRequest(), timeout=30, metadata=metadata
        )
        assert any(tool.name == "Read" for tool in listed.tools)
