"""The egress proxy against the real OPA with the shipped egress rules, driven from the host.

The resolver is the one part replaced (tests may not ask the network's DNS): it answers from a
table, counts its lookups and can change its answer between two lookups (rebinding). Upstream
servers listen on 127.0.0.2; the tests' data.json allows them, naming the loopback range.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from daemon.config import PROJECT_ROOT
from daemon.egress.proxy import CallEgress, EgressCall, EgressProxy
from daemon.policy.opa_engine import OpaPolicyEngine
from daemon.policy.opa_server import ManagedOpa, find_opa
from sandbox.backend import SandboxLimits

pytestmark = pytest.mark.integration

UPSTREAM = "127.0.0.2"
CALL = {
    "tool_use_id": "toolu_egress",
    "tool": "Bash",
    "caller": {"principal": "builder", "transport": "unix"},
    "session": {"id": "s1", "workspace": "/ws", "mode": "default", "grants": []},
}


class Resolver:
    """Names from a table; `then` gives a different answer from the second lookup on."""

    def __init__(self, table: dict[str, list[str]], then: dict[str, list[str]] | None = None):
        self.table = table
        self.then = then or {}
        self.lookups: list[str] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.lookups.append(host)
        if self.lookups.count(host) > 1 and host in self.then:
            return self.then[host]
        if host not in self.table:
            raise OSError(f"no such name {host}")
        return self.table[host]


async def _upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """GET /size/N answers N bytes; /slow trickles until the client goes."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        path = head.split(b" ")[1].decode()
        if path.startswith("/size/"):
            size = int(path.removeprefix("/size/"))
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % size)
            writer.write(b"x" * size)
        elif path == "/slow":
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100000000\r\n\r\n")
            for _ in range(600):
                writer.write(b"y" * 1000)
                await writer.drain()
                await asyncio.sleep(0.05)
        else:
            body = f"hello {path} host={_header(head, b'host')}".encode()
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


def _header(head: bytes, name: bytes) -> str:
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name:
            return value.strip().decode()
    return ""


@pytest_asyncio.fixture
async def upstream_port() -> AsyncIterator[int]:
    server = await asyncio.start_server(_upstream, UPSTREAM, 0)
    port = int(server.sockets[0].getsockname()[1])
    async with server:
        yield port


def _policies(folder: Path, port: int, budget: dict[str, int] | None = None) -> Path:
    policies = folder / "policies"
    shutil.copytree(PROJECT_ROOT / "policies", policies)
    data = json.loads((policies / "data.json").read_text())
    rules: list[dict[str, Any]] = [
        {"hosts": ["up.test", UPSTREAM], "ports": [port], "address_ranges": ["loopback"]},
        {"hosts": ["plain.test"], "ports": [port]},
        {"hosts": ["api.test"], "ports": [port], "methods": ["GET"], "paths": ["/v1/"],
         "address_ranges": ["loopback"]},
    ]  # fmt: skip
    builder: dict[str, Any] = {"allow": rules}
    if budget:
        builder["budget"] = budget
    data["tooljail"]["egress"]["principals"]["builder"] = builder
    (policies / "data.json").write_text(json.dumps(data))
    return policies


class Proxy:
    """A proxy for one call on a Unix socket, with the real OPA behind it."""

    def __init__(self, egress: CallEgress, socket_path: Path, audit: list[dict[str, Any]]):
        self.egress = egress
        self.socket_path = socket_path
        self.audit = audit

    async def send(self, data: bytes) -> bytes:
        reader, writer = await asyncio.open_unix_connection(str(self.socket_path))
        writer.write(data)
        await writer.drain()
        try:
            return await asyncio.wait_for(reader.read(-1), 30)
        finally:
            writer.close()

    async def get(self, url: str) -> bytes:
        host = url.split("/")[2]
        return await self.send(f"GET {url} HTTP/1.1\r\nhost: {host}\r\n\r\n".encode())


@pytest_asyncio.fixture
async def opa(
    tmp_path: Path, upstream_port: int
) -> AsyncIterator[tuple[ManagedOpa, OpaPolicyEngine]]:
    server = ManagedOpa(
        find_opa(None, PROJECT_ROOT), _policies(tmp_path, upstream_port), tmp_path / "o" / "s.sock"
    )
    await server.start()
    engine = OpaPolicyEngine(
        server.url, 10.0, SandboxLimits(), "test", loading=lambda: server.loading
    )
    await engine.open()
    try:
        yield server, engine
    finally:
        await engine.close()
        await server.stop()


async def _proxy(
    tmp_path: Path, engine: OpaPolicyEngine, resolver: Resolver
) -> AsyncIterator[Proxy]:
    audit: list[dict[str, Any]] = []
    proxy = EgressProxy(engine, audit.append, resolver=resolver)
    egress = proxy.for_call(EgressCall("toolu_egress", CALL))
    socket_path = tmp_path / "proxy.sock"
    async with egress.listen(socket_path):
        yield Proxy(egress, socket_path, audit)


def _body(response: bytes) -> bytes:
    return response.partition(b"\r\n\r\n")[2]


async def test_allowed_request_is_relayed_and_audited(
    tmp_path: Path, opa: tuple[ManagedOpa, OpaPolicyEngine], upstream_port: int
) -> None:
    resolver = Resolver({"up.test": [UPSTREAM]})
    async for proxy in _proxy(tmp_path, opa[1], resolver):
        response = await proxy.get(f"http://up.test:{upstream_port}/a?b=1")
        assert response.startswith(b"HTTP/1.1 200"), response
        assert _body(response) == f"hello /a?b=1 host=up.test:{upstream_port}".encode()
        assert b"connection: close" in response.lower()
    [record] = proxy.audit
    assert record["decision"] == "allow" and record["status"] == 200
    assert record["addresses"] == [UPSTREAM] and record["connected_to"] == UPSTREAM
    assert record["decision_id"] and record["tool_use_id"] == "toolu_egress"
    assert record["bytes_down"] == len(_body(response)) and record["bytes_up"] == 0
    assert proxy.egress.note() == ""


async def test_refused_destinations_are_explained_and_noted(
    tmp_path: Path, opa: tuple[ManagedOpa, OpaPolicyEngine], upstream_port: int
) -> None:
    resolver = Resolver({"up.test": [UPSTREAM], "other.test": [UPSTREAM]})
    async for proxy in _proxy(tmp_path, opa[1], resolver):
        other = await proxy.get(f"http://other.test:{upstream_port}/")
        port = await proxy.send(b"CONNECT up.test:1 HTTP/1.1\r\nhost: up.test:1\r\n\r\n")
    assert other.startswith(b"HTTP/1.1 403"), other
    assert b'No egress rule lets principal "builder" reach GET other.test' in other
    assert port.startswith(b"HTTP/1.1 403")
    note = proxy.egress.note()
    assert f"other.test:{upstream_port} refused" in note and "up.test:1 refused" in note
    assert all(r["decision"] == "deny" and r["end"] == "refused" for r in proxy.audit)


async def test_methods_and_paths_are_decided_per_request(
    tmp_path: Path, opa: tuple[ManagedOpa, OpaPolicyEngine], upstream_port: int
) -> None:
    resolver = Resolver({"api.test": [UPSTREAM]})
    async for proxy in _proxy(tmp_path, opa[1], resolver):
        ok = await proxy.get(f"http://api.test:{upstream_port}/v1/items")
        other_path = await proxy.get(f"http://api.test:{upstream_port}/v2/items")
        post = await proxy.send(
            f"POST http://api.test:{upstream_port}/v1/items HTTP/1.1\r\nhost: api.test\r\n"
            "content-length: 2\r\n\r\nhi".encode()
        )
        tunnel = await proxy.send(f"CONNECT api.test:{upstream_port} HTTP/1.0\r\n\r\n".encode())
    assert ok.startswith(b"HTTP/1.1 200")
    assert other_path.startswith(b"HTTP/1.1 403")
    assert post.startswith(b"HTTP/1.1 403")
    assert tunnel.startswith(b"HTTP/1.1 403"), "a path rule matches no opaque tunnel"


async def test_names_resolving_to_private_or_loopback_need_a_rule_naming_the_range(
    tmp_path: Path, opa: tuple[ManagedOpa, OpaPolicyEngine], upstream_port: int
) -> None:
    """plain.test's rule names no range (public only): loopback, private networks and the
    metadata address are refused although the host is allowed."""
    for address in (UPSTREAM, "10.1.2.3", "169.254.169.254", "::ffff:127.0.0.1"):
        resolver = Resolver({"plain.test": [address]})
        async for proxy in _proxy(tmp_path, opa[1], resolver):
            response = await proxy.get(f"http://plain.test:{upstream_port}/")
        assert response.startswith(b"HTTP/1.1 403"), (address, response)
        assert b"resolved only to addresses the policy does not allow" in response
        assert "connected_to" not in proxy.audit[0]


async def test_rebinding_cannot_switch_the_address(
    tmp_path: Path, opa: tuple[ManagedOpa, OpaPolicyEngine], upstream_port: int
) -> None:
    """One lookup per connection, and the connection goes to the address decided on, whatever
    the name says afterwards."""
    resolver = Resolver({"up.test": [UPSTREAM]}, then={"up.test": ["10.9.9.9"]})
    async for proxy in _proxy(tmp_path, opa[1], resolver):
        first = await proxy.get(f"http://up.test:{upstream_port}/one")
        assert resolver.lookups == ["up.test"]
        second = await proxy.get(f"http://up.test:{upstream_port}/two")
    assert first.startswith(b"HTTP/1.1 200")
    assert second.startswith(b"HTTP/1.1 403"), "the second lookup's answer is decided afresh"
    assert resolver.lookups == ["up.test", "up.test"]
    assert proxy.audit[0]["connected_to"] == UPSTREAM
    assert proxy.audit[1]["addresses"] == ["10.9.9.9"]


def _client_hello(server_name: str) -> bytes:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=server_name)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


async def test_a_tls_hello_must_name_the_connect_host(
    tmp_path: Path, opa: tuple[ManagedOpa, OpaPolicyEngine], upstream_port: int
) -> None:
    resolver = Resolver({"up.test": [UPSTREAM]})
    async for proxy in _proxy(tmp_path, opa[1], resolver):
        connect = f"CONNECT up.test:{upstream_port} HTTP/1.0\r\n\r\n".encode()
        mismatch = await proxy.send(connect + _client_hello("evil.test"))
        reader, writer = await asyncio.open_unix_connection(str(proxy.socket_path))
        writer.write(connect + _client_hello("up.test"))
        matching = await reader.read(4096)
        async with asyncio.timeout(10):
            while proxy.egress.usage.connections < 1:  # the hello went on to the server
                await asyncio.sleep(0.01)
        writer.close()
    assert mismatch == b"HTTP/1.1 200 Connection established\r\n\r\n", "closed, nothing relayed"
    refused, allowed = proxy.audit
    assert (
        "differs from the CONNECT host" in refused["reasons"][0] and refused["sni"] == "evil.test"
    )
    assert "connected_to" not in refused
    assert allowed["sni"] == "up.test" and allowed["connected_to"] == UPSTREAM
    assert matching.startswith(b"HTTP/1.1 200 Connection established")
    assert "evil.test" in proxy.egress.note() or "differs" in proxy.egress.note()


async def test_budgets_close_the_calls_connections(tmp_path: Path, upstream_port: int) -> None:
    server = ManagedOpa(
        find_opa(None, PROJECT_ROOT),
        _policies(tmp_path, upstream_port, {"connections": 3, "bytes": 50_000}),
        tmp_path / "o" / "s.sock",
    )
    await server.start()
    engine = OpaPolicyEngine(server.url, 10.0, SandboxLimits(), "test")
    await engine.open()
    try:
        resolver = Resolver({"up.test": [UPSTREAM]})
        async for proxy in _proxy(tmp_path, engine, resolver):
            small = await proxy.get(f"http://up.test:{upstream_port}/size/1000")
            big = await proxy.get(f"http://up.test:{upstream_port}/size/200000")
            third = await proxy.get(f"http://up.test:{upstream_port}/size/10")
            fourth = await proxy.get(f"http://up.test:{upstream_port}/size/10")
    finally:
        await engine.close()
        await server.stop()
    assert _body(small) == b"x" * 1000
    assert len(_body(big)) < 200_000, "the download stops at the byte budget"
    assert third.startswith(b"HTTP/1.1 403") and b"byte budget" in third
    assert fourth.startswith(b"HTTP/1.1 403")
    assert "byte budget (50000 bytes) is spent" in proxy.egress.note()
    assert sum(r["bytes_down"] for r in proxy.audit) <= 50_000 + 262_144


async def test_connection_budget(tmp_path: Path, upstream_port: int) -> None:
    server = ManagedOpa(
        find_opa(None, PROJECT_ROOT),
        _policies(tmp_path, upstream_port, {"connections": 2, "bytes": 10_000_000}),
        tmp_path / "o" / "s.sock",
    )
    await server.start()
    engine = OpaPolicyEngine(server.url, 10.0, SandboxLimits(), "test")
    await engine.open()
    try:
        resolver = Resolver({"up.test": [UPSTREAM]})
        async for proxy in _proxy(tmp_path, engine, resolver):
            answers = [await proxy.get(f"http://up.test:{upstream_port}/{i}") for i in range(3)]
    finally:
        await engine.close()
        await server.stop()
    assert [a[:12] for a in answers] == [b"HTTP/1.1 200", b"HTTP/1.1 200", b"HTTP/1.1 403"]
    assert b"connection budget (2) is spent" in answers[2]


async def test_opa_dying_mid_transfer_refuses_new_connections_and_nothing_hangs(
    tmp_path: Path, opa: tuple[ManagedOpa, OpaPolicyEngine], upstream_port: int
) -> None:
    server, engine = opa
    resolver = Resolver({"up.test": [UPSTREAM]})
    async for proxy in _proxy(tmp_path, engine, resolver):
        reader, writer = await asyncio.open_unix_connection(str(proxy.socket_path))
        writer.write(
            f"GET http://up.test:{upstream_port}/slow HTTP/1.1\r\nhost: x\r\n\r\n".encode()
        )
        assert (await reader.read(4096)).startswith(b"HTTP/1.1 200")
        assert server._process is not None
        server._process.kill()
        refused = await proxy.get(f"http://up.test:{upstream_port}/after")
        # The decided transfer goes on; new connections are refused meanwhile.
        assert len(await asyncio.wait_for(reader.read(4096), 10)) > 0
        writer.close()
    assert refused.startswith(b"HTTP/1.1 403") and b"policy engine (OPA)" in refused


async def test_the_calls_end_closes_its_connections(
    tmp_path: Path, opa: tuple[ManagedOpa, OpaPolicyEngine], upstream_port: int
) -> None:
    """When the call ends (or its proxy goes) mid-transfer, the sandbox's connection ends too
    and the socket is gone."""
    resolver = Resolver({"up.test": [UPSTREAM]})
    audit: list[dict[str, Any]] = []
    proxy = EgressProxy(opa[1], audit.append, resolver=resolver)
    egress = proxy.for_call(EgressCall("toolu_egress", CALL))
    socket_path = tmp_path / "proxy.sock"
    async with egress.listen(socket_path):
        reader, writer = await asyncio.open_unix_connection(str(socket_path))
        writer.write(
            f"GET http://up.test:{upstream_port}/slow HTTP/1.1\r\nhost: x\r\n\r\n".encode()
        )
        assert (await reader.read(4096)).startswith(b"HTTP/1.1 200")
    rest = await asyncio.wait_for(reader.read(-1), 10)
    assert len(rest) < 100_000_000
    assert not socket_path.exists()
    assert audit and audit[0]["end"] == "the call ended"
    writer.close()


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET / HTTP/1.1\r\nhost: up.test\r\n\r\n",  # origin form: not a proxy request
        b"GET https://up.test/ HTTP/1.1\r\nhost: up.test\r\n\r\n",
        b"CONNECT user@up.test:443 HTTP/1.0\r\n\r\n",
        b"CONNECT 0x7f.1:80 HTTP/1.0\r\n\r\n",
        b"GARBAGE\r\n\r\n",
        b"GET http://up.test/ HTTP/1.1\r\ncontent-length: 1\r\ntransfer-encoding: chunked\r\n\r\n",
    ],
)
async def test_malformed_requests_get_a_clear_refusal(
    tmp_path: Path, opa: tuple[ManagedOpa, OpaPolicyEngine], request_bytes: bytes
) -> None:
    resolver = Resolver({"up.test": [UPSTREAM]})
    async for proxy in _proxy(tmp_path, opa[1], resolver):
        response = await proxy.send(request_bytes)
    assert response.startswith(b"HTTP/1.1 400"), response
    assert resolver.lookups == []
