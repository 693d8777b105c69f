"""The daemon's listeners: which are gated on a bearer token before a request is read, which are
bounded, where a plaintext listen address may be, the descriptors their connections may take,
and each principal's turns to have a request read."""

from __future__ import annotations

import asyncio
import resource
import socket
import urllib.parse
from pathlib import Path
from typing import Any
from unittest.mock import MagicMock

import grpc
import pytest
from grpc_health.v1 import health
from pydantic import SecretStr, ValidationError

from daemon.config import AuthSettings, Settings
from daemon.errors import Overloaded, RequestError, TooljailError
from daemon.host.descriptor_limit import reserve_descriptors
from daemon.server.credential_gate import CredentialGate
from daemon.server.grpc_server import build_servers, listeners
from daemon.server.identity import CallerResolver
from daemon.server.listen import ListenAddress
from daemon.server.receipts import Receipts
from daemon.server.status import status_message

TOKEN = "gate-unit-token"


def _settings(**values: Any) -> Settings:
    return Settings(auth={"tokens": {"alice": SecretStr(TOKEN)}}, **values)


def _plan(settings: Settings) -> list[tuple[bool, bool, bool]]:
    address = ListenAddress.parse(settings.listen)
    return [
        (listener.tcp, listener.gated, listener.credentials is not None)
        for listener in listeners(settings, address)
    ]


def test_a_unix_socket_alone_is_neither_gated_nor_bounded(tmp_path: Path) -> None:
    settings = _settings(listen=f"unix://{tmp_path}/s.sock")
    assert _plan(settings) == [(False, False, False)]


def test_a_plaintext_tcp_listener_is_gated_and_bounded(tmp_path: Path) -> None:
    settings = _settings(listen=f"unix://{tmp_path}/s.sock", tcp={"address": "127.0.0.1:1"})
    assert _plan(settings) == [(False, False, False), (True, True, False)]
    assert _plan(_settings(listen="127.0.0.1:1")) == [(True, True, False)]


def test_an_mtls_listener_is_bounded_and_left_to_its_handshake(tmp_path: Path) -> None:
    for name in ("server.pem", "server.key", "ca.pem"):  # read here, checked at the bind
        (tmp_path / name).write_text(f"not checked before the bind: {name}\n")
    tcp = {
        "address": "127.0.0.1:1",
        "tls_cert": tmp_path / "server.pem",
        "tls_key": tmp_path / "server.key",
        "client_ca": tmp_path / "ca.pem",
    }
    settings = _settings(listen=f"unix://{tmp_path}/s.sock", tcp=tcp)
    assert _plan(settings) == [(False, False, False), (True, False, True)]
    tls_only = {key: value for key, value in tcp.items() if key != "client_ca"}
    settings = _settings(listen=f"unix://{tmp_path}/s.sock", tcp=tls_only)
    assert _plan(settings)[1] == (True, True, True)


@pytest.mark.parametrize("listen", ["0.0.0.0:50051", "10.0.0.1:50051", "[::]:1", "host.example:1"])
def test_a_plaintext_listen_address_off_loopback_is_refused(listen: str) -> None:
    with pytest.raises(ValidationError, match="must be a loopback address"):
        _settings(listen=listen)


@pytest.mark.parametrize("listen", ["127.0.0.1:50051", "[::1]:50051", "localhost:50051"])
def test_a_plaintext_listen_address_on_loopback_is_taken(listen: str) -> None:
    assert _settings(listen=listen).listen == listen


class _Details:
    def __init__(self, metadata: tuple[tuple[str, str], ...]) -> None:
        self.method = "/tooljail.v1.Executor/Execute"
        self.invocation_metadata = metadata


def _gate_lets_through(metadata: tuple[tuple[str, str], ...]) -> bool:
    gate = CredentialGate(CallerResolver(AuthSettings(tokens={"alice": SecretStr(TOKEN)})))
    service_handler = grpc.unary_unary_rpc_method_handler(lambda request, context: request)

    async def continuation(details: object) -> object:
        return service_handler

    handler = asyncio.run(gate.intercept_service(continuation, _Details(metadata)))  # type: ignore[arg-type]
    if handler is service_handler:
        return True
    # The refusal reads nothing: its handler takes the request as a stream it never iterates.
    assert handler is not None and handler.request_streaming and not handler.response_streaming
    return False


@pytest.mark.parametrize(
    ("metadata", "through"),
    [
        ((("authorization", f"Bearer {TOKEN}"),), True),
        ((("authorization", f"bearer {TOKEN} "),), True),
        ((), False),
        ((("authorization", "Bearer wrong"),), False),
        ((("authorization", TOKEN),), False),
        ((("authorization", f"Basic {TOKEN}"),), False),
        ((("x-authorization", f"Bearer {TOKEN}"),), False),
    ],
)
def test_the_gate_lets_through_only_a_valid_bearer_token(
    metadata: tuple[tuple[str, str], ...], through: bool
) -> None:
    assert _gate_lets_through(metadata) is through


def _limits(monkeypatch: pytest.MonkeyPatch, soft: int, hard: int) -> list[tuple[int, int]]:
    set_to: list[tuple[int, int]] = []
    monkeypatch.setattr(resource, "getrlimit", lambda kind: (soft, hard))
    monkeypatch.setattr(resource, "setrlimit", lambda kind, limits: set_to.append(limits))
    return set_to


def test_descriptors_are_left_alone_when_connections_take_at_most_half(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    set_to = _limits(monkeypatch, 1024, 4096)
    assert reserve_descriptors(512) == 1024
    assert set_to == []


def test_the_soft_descriptor_limit_is_raised_to_the_hard_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    set_to = _limits(monkeypatch, 1024, 65536)
    assert reserve_descriptors(1000) == 65536
    assert set_to == [(65536, 65536)]


def test_connections_past_half_the_hard_limit_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    set_to = _limits(monkeypatch, 1024, 4096)
    with pytest.raises(TooljailError, match=r"tcp\.max_connections"):
        reserve_descriptors(2049)
    assert set_to == []


def test_a_taken_port_is_refused_with_what_to_look_for(tmp_path: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    address = f"127.0.0.1:{taken.getsockname()[1]}"
    settings = _settings(listen=f"unix://{tmp_path}/s.sock", tcp={"address": address})
    servicer = MagicMock()

    async def build() -> None:
        build_servers(
            settings,
            ListenAddress.parse(settings.listen),
            servicer,
            servicer,
            health.aio.HealthServicer(),
            CallerResolver(settings.auth),
        )

    try:
        with pytest.raises(TooljailError, match="collect the tokens"):
            asyncio.run(build())
    finally:
        taken.close()


# --- receipt turns ---------------------------------------------------------------------------


def test_a_principals_requests_wait_for_its_turns_and_others_do_not() -> None:
    async def scenario() -> list[str]:
        receipts = Receipts(per_principal=2, timeout_s=30)
        seen: list[str] = []
        release = asyncio.Event()

        async def receive(principal: str, name: str) -> None:
            async with receipts.turn(principal):
                seen.append(name)
                await release.wait()

        bob = [asyncio.create_task(receive("bob", f"bob{i}")) for i in range(3)]
        await asyncio.sleep(0.05)
        alice = asyncio.create_task(receive("alice", "alice"))
        await asyncio.sleep(0.05)
        assert seen == ["bob0", "bob1", "alice"]  # bob's third waits, alice does not
        release.set()
        await asyncio.gather(*bob, alice)
        return seen

    assert asyncio.run(scenario())[-1] == "bob2"


def test_a_turn_waited_for_too_long_is_refused_and_forgotten() -> None:
    async def scenario() -> Receipts:
        receipts = Receipts(per_principal=1, timeout_s=0.05)
        async with receipts.turn("bob"):
            with pytest.raises(Overloaded, match="on their way in"):
                async with receipts.turn("bob"):
                    pass
        return receipts

    receipts = asyncio.run(scenario())
    assert receipts._turns.waiting("bob") == 0 and receipts._turns._own == {}


class _Reading:
    """A servicer context whose read gives `message` after `delay_s`."""

    def __init__(self, message: object, delay_s: float = 0.0) -> None:
        self._message, self._delay_s = message, delay_s

    async def read(self) -> object:
        await asyncio.sleep(self._delay_s)
        return self._message


def test_a_request_that_does_not_arrive_whole_in_time_is_refused() -> None:
    receipts = Receipts(per_principal=1, timeout_s=0.05)
    assert asyncio.run(receipts.received(_Reading(b"whole"))) == b"whole"  # type: ignore[arg-type]
    with pytest.raises(Overloaded, match="did not arrive whole"):
        asyncio.run(receipts.received(_Reading(b"late", 3600)))  # type: ignore[arg-type]
    with pytest.raises(RequestError, match="exactly one request message"):
        asyncio.run(receipts.received(_Reading(grpc.aio.EOF)))  # type: ignore[arg-type]


# --- status messages -------------------------------------------------------------------------


@pytest.mark.parametrize("char", ["a", "é", "€", "😀"])
def test_a_status_message_fits_the_clients_metadata_limit_whatever_its_characters(
    char: str,
) -> None:
    message = status_message(RequestError("bad: " + char * 5_000))
    assert len(urllib.parse.quote(message)) < 8 * 1024  # gRPC clients' soft limit
    assert message.startswith("bad: " + char * 10) and "chars cut" in message


def test_a_short_status_message_is_kept_whole() -> None:
    assert status_message(RequestError("é" * 900)) == "é" * 900
