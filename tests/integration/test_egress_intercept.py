"""Intercepted HTTPS (a credential added at the edge) through the egress proxy, from the host,
against the real OPA: what the server and the sandbox's client each see, refusals answered
inside TLS, big bodies intact, budgets and the call's end stopping the worker threads that carry
these exchanges, and opaque tunnels carried by the kernel in both directions."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import random
import shutil
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from daemon.config import PROJECT_ROOT
from daemon.egress.ca import EgressCA
from daemon.egress.credentials import CredentialRule, Credentials
from daemon.egress.proxy import CallEgress, EgressCall, EgressProxy, EgressSettings
from daemon.policy.opa_engine import OpaPolicyEngine
from daemon.policy.opa_server import ManagedOpa, find_opa
from sandbox.backend import SandboxLimits
from tests.integration.test_egress_proxy import CALL, UPSTREAM, Resolver

pytestmark = pytest.mark.integration

SECRET = b"tj-intercept-" + bytes(random.Random(7).choices(b"abcdef0123456789", k=24))
BIG = random.Random(3).randbytes(3 << 20)
SEEN: list[bytes] = []
"""The request heads the upstream received."""


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """/big: BIG; /echo: the request head back; /slow: trickles; /upload: the body's sha256;
    else: hello."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        SEEN.append(head)
        path = head.split(b" ")[1]
        if path == b"/big":
            body = BIG
        elif path == b"/echo":
            body = head
        elif path == b"/upload":
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            body = hashlib.sha256(await reader.readexactly(length)).hexdigest().encode()
        elif path == b"/slow":
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100000000\r\n\r\n")
            for _ in range(600):
                writer.write(b"y" * 1000)
                await writer.drain()
                await asyncio.sleep(0.05)
            return
        else:
            body = b"hello " + path
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
        await writer.drain()
    except (OSError, asyncio.IncompleteReadError, ssl.SSLError):
        pass
    finally:
        writer.close()


class World:
    """An upstream HTTPS server, the real OPA with rules for it, and the proxy's CA."""

    def __init__(self, folder: Path, port: int, upstream_ca: Path) -> None:
        self.folder = folder
        self.port = port
        self.upstream_trust = ssl.create_default_context(cafile=str(upstream_ca))
        self.ca = EgressCA.load_or_create(folder / "egress-ca")
        self.sandbox_trust = ssl.create_default_context(cadata=self.ca.certificate_pem.decode())
        secret = folder / "secret"
        secret.write_bytes(SECRET + b"\n")
        secret.chmod(0o600)
        self.credentials = Credentials(
            [CredentialRule(host="secure.test", port=port, secret_file=secret)]
        )
        self.engine: OpaPolicyEngine | None = None


def _policies(folder: Path, port: int, budget: dict[str, int] | None) -> Path:
    policies = folder / "policies"
    shutil.copytree(PROJECT_ROOT / "policies", policies)
    data = json.loads((policies / "data.json").read_text())
    rules = [
        {"hosts": ["secure.test"], "ports": [port], "methods": ["GET", "POST"],
         "paths": ["/"], "address_ranges": ["loopback"]},
        {"hosts": ["raw.test"], "ports": [port], "opaque": True, "address_ranges": ["loopback"]},
    ]  # fmt: skip
    principal: dict[str, Any] = {"allow": rules}
    if budget:
        principal["budget"] = budget
    data["tooljail"]["egress"]["principals"]["builder"] = principal
    (policies / "data.json").write_text(json.dumps(data))
    return policies


@pytest_asyncio.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    upstream_ca = EgressCA.load_or_create(tmp_path / "upstream-ca")
    (tmp_path / "upstream-ca.pem").write_bytes(upstream_ca.certificate_pem)
    server = await asyncio.start_server(
        _serve, UPSTREAM, 0, ssl=upstream_ca.server_context("secure.test")
    )
    port = int(server.sockets[0].getsockname()[1])
    async with server:
        yield World(tmp_path, port, tmp_path / "upstream-ca.pem")


@contextlib.asynccontextmanager
async def _proxy(
    world: World, budget: dict[str, int] | None = None, settings: EgressSettings | None = None
) -> AsyncIterator[tuple[CallEgress, Path, list[dict[str, Any]]]]:
    opa = ManagedOpa(
        find_opa(None, PROJECT_ROOT),
        _policies(world.folder / f"p{time.monotonic_ns()}", world.port, budget),
        world.folder / f"o{time.monotonic_ns()}" / "s.sock",
    )
    await opa.start()
    engine = OpaPolicyEngine(opa.url, 10.0, SandboxLimits(), "test")
    await engine.open()
    audit: list[dict[str, Any]] = []
    proxy = EgressProxy(
        engine,
        audit.append,
        resolver=Resolver({"secure.test": [UPSTREAM], "raw.test": [UPSTREAM]}),
        credentials=world.credentials,
        ca=world.ca,
        upstream_tls=world.upstream_trust,
        settings=settings or EgressSettings(),
    )
    egress = proxy.for_call(EgressCall("toolu_egress", CALL))
    socket_path = world.folder / "proxy.sock"
    try:
        async with egress.listen(socket_path):
            yield egress, socket_path, audit
    finally:
        await engine.close()
        await opa.stop()


async def _tunnel(
    socket_path: Path, host: str, port: int, trust: ssl.SSLContext | None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_unix_connection(str(socket_path))
    writer.write(f"CONNECT {host}:{port} HTTP/1.1\r\nhost: {host}:{port}\r\n\r\n".encode())
    answer = await reader.readuntil(b"\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200"), answer
    if trust is not None:
        await writer.start_tls(trust, server_hostname=host)
    return reader, writer


async def _https(socket_path: Path, world: World, request: bytes) -> bytes:
    reader, writer = await _tunnel(socket_path, "secure.test", world.port, world.sandbox_trust)
    try:
        writer.write(request)
        await writer.drain()
        return await asyncio.wait_for(reader.read(-1), 30)
    finally:
        writer.close()


def _get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nhost: secure.test\r\n\r\n".encode()


async def test_the_server_gets_the_credential_and_the_sandbox_never_sees_it(world: World) -> None:
    SEEN.clear()
    async with _proxy(world) as (egress, socket_path, audit):
        hello = await _https(socket_path, world, _get("/v1/x"))
        echo = await _https(socket_path, world, _get("/echo"))
    assert hello.startswith(b"HTTP/1.1 200") and hello.endswith(b"hello /v1/x")
    assert b"\r\nauthorization: bearer " + SECRET.lower() in SEEN[0].lower()
    # The echo carried the secret back; it reached the sandbox starred, same length.
    assert echo.startswith(b"HTTP/1.1 200") and SECRET not in echo
    assert b"Bearer " + b"*" * len(SECRET) in echo
    assert [line["credential"] for line in audit] == [True, True]
    assert {line["method"] for line in audit} == {"GET"} and egress.note() == ""


async def test_a_big_body_arrives_intact_both_ways(world: World) -> None:
    upload = random.Random(5).randbytes(2 << 20)
    async with _proxy(world) as (_, socket_path, audit):
        big = await _https(socket_path, world, _get("/big"))
        posted = await _https(
            socket_path,
            world,
            b"POST /upload HTTP/1.1\r\nhost: secure.test\r\ncontent-length: %d\r\n\r\n"
            % len(upload)
            + upload,
        )
    head, _, body = big.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and hashlib.sha256(body).digest() == (
        hashlib.sha256(BIG).digest()
    )
    assert posted.endswith(hashlib.sha256(upload).hexdigest().encode())
    assert audit[0]["bytes_down"] > len(BIG) and audit[1]["bytes_up"] > len(upload)


async def test_refusals_inside_the_tunnel_are_answered_inside_tls(world: World) -> None:
    """The sandbox's client reads the refusal as an HTTPS answer, not as garbage."""
    async with _proxy(world) as (egress, socket_path, _):
        trace = await _https(socket_path, world, b"TRACE / HTTP/1.1\r\nhost: secure.test\r\n\r\n")
        delete = await _https(
            socket_path, world, b"DELETE /v1/x HTTP/1.1\r\nhost: secure.test\r\n\r\n"
        )
        garbage = await _https(socket_path, world, b"NOT HTTP AT ALL\r\n\r\n")
    assert trace.startswith(b"HTTP/1.1 403") and b"echoes" in trace
    assert delete.startswith(b"HTTP/1.1 403") and b"DELETE" in delete
    assert garbage.startswith(b"HTTP/1.1 400")
    assert "refused" in egress.note()


async def test_a_spent_byte_budget_stops_an_intercepted_download(world: World) -> None:
    budget = {"connections": 10, "bytes": 1 << 20}
    async with _proxy(world, budget=budget) as (egress, socket_path, audit):
        big = await _https(socket_path, world, _get("/big"))
    assert len(big) < len(BIG)
    assert "byte budget" in egress.note()
    assert audit[0]["bytes_down"] <= (1 << 20) + (256 << 10)


async def test_the_calls_end_stops_intercepted_and_tunnelled_transfers(world: World) -> None:
    """The threads carrying these bytes are woken and end with the call: the proxy's listen
    returns at once, and the sandbox's connections end."""
    async with _proxy(world) as (_, socket_path, audit):
        slow_reader, slow_writer = await _tunnel(
            socket_path, "secure.test", world.port, world.sandbox_trust
        )
        slow_writer.write(_get("/slow"))
        assert (await slow_reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
        raw_reader, raw_writer = await _tunnel(socket_path, "raw.test", world.port, None)
        raw_writer.write(b"not tls, and nothing will answer")  # an opaque tunnel, idle
        await raw_writer.drain()
        await asyncio.sleep(0.2)
    rest = await asyncio.wait_for(slow_reader.read(-1), 10)
    assert len(rest) < 100_000_000
    assert await asyncio.wait_for(raw_reader.read(-1), 10) == b""
    assert sorted(line["end"] for line in audit) == ["the call ended", "the call ended"]
    slow_writer.close()
    raw_writer.close()


async def test_an_opaque_tunnel_carries_bytes_both_ways(world: World) -> None:
    """raw.test is opaque: the client speaks TLS itself, end to end with the server (the
    proxy's CA is not involved), through the spliced tunnel."""
    end_to_end = ssl.create_default_context(cafile=str(world.folder / "upstream-ca.pem"))
    end_to_end.check_hostname = False  # the server's certificate names secure.test
    async with _proxy(world) as (_, socket_path, audit):
        reader, writer = await _tunnel(socket_path, "raw.test", world.port, None)
        await writer.start_tls(end_to_end, server_hostname="raw.test")
        writer.write(_get("/big"))
        answer = await asyncio.wait_for(reader.read(-1), 30)
        writer.close()
    assert hashlib.sha256(answer.partition(b"\r\n\r\n")[2]).digest() == (
        hashlib.sha256(BIG).digest()
    )
    assert audit[0]["bytes_down"] > len(BIG) and "credential" not in audit[0]


async def test_a_silent_client_inside_an_intercepted_tunnel_is_timed_out(world: World) -> None:
    """Neither a TLS handshake that never comes nor a request head that never comes holds the
    connection (and its thread) past the head timeout."""
    async with _proxy(world, settings=EgressSettings(head_timeout_s=0.5)) as (_, path, audit):
        mute_reader, mute_writer = await _tunnel(path, "secure.test", world.port, None)
        quiet_reader, quiet_writer = await _tunnel(
            path, "secure.test", world.port, world.sandbox_trust
        )
        assert await asyncio.wait_for(mute_reader.read(-1), 30) == b""
        assert await asyncio.wait_for(quiet_reader.read(-1), 30) == b""
        mute_writer.close()
        quiet_writer.close()
        # The sandbox sees the end as the proxy shuts the socket; the audit line follows.
        for _ in range(600):
            if len(audit) == 2:
                break
            await asyncio.sleep(0.05)
    assert [line["end"] for line in audit] == ["timed out"] * 2, audit
