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

from tests.integration.harness import RunningDaemon, running_daemon
from tests.integration.raw_http2 import (
    DATA,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADERS,
    SETTINGS_MAX_CONCURRENT_STREAMS,
    RawConnection,
    ended,
    frame,
    message_prefix,
    request_headers,
)
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


def test_the_listener_takes_only_so_many_connections_and_the_unix_socket_serves_on(
    bounded: tuple[RunningDaemon, str],
) -> None:
    daemon, target = bounded
    held = [RawConnection(target) for _ in range(MAX_CONNECTIONS)]
    try:
        for connection in held:
            connection.settings()
        extra = RawConnection(target)
        try:
            with pytest.raises((EOFError, ConnectionError)):
                extra.settings()
        finally:
            extra.close()
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
