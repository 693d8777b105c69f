"""The daemon's listeners: which are gated on a bearer token before a request is read, which are
bounded, where a plaintext listen address may be, and the descriptors their connections may
take."""

from __future__ import annotations

import asyncio
import resource
from pathlib import Path
from typing import Any

import grpc
import pytest
from pydantic import SecretStr, ValidationError

from daemon.config import AuthSettings, Settings
from daemon.errors import TooljailError
from daemon.host.descriptor_limit import reserve_descriptors
from daemon.server.credential_gate import CredentialGate
from daemon.server.grpc_server import listeners
from daemon.server.identity import CallerResolver
from daemon.server.listen import ListenAddress

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
