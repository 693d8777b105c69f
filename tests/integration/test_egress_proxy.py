"""The egress proxy against the real OPA with the shipped egress rules, driven from the host.

The resolver is the one part replaced (tests may not ask the network's DNS): it answers from a
table, counts its lookups and can change its answer between two lookups (rebinding). Upstream
servers listen on 127.0.0.2; the tests' data.json allows them, naming the loopback range.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import ssl
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from daemon.config import PROJECT_ROOT
from daemon.egress.proxy import CallEgress, EgressCall, EgressProxy, EgressSettings
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


HEADS: list[bytes] = []
"""Every request head an upstream received (the newest last)."""
ACCEPTED: list[int] = []
"""One entry per connection an upstream accepted."""


async def _upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """GET /size/N answers N bytes; /slow trickles until the client goes."""
    ACCEPTED.append(1)
    try:
        first = await reader.readexactly(1)
        if first == b"\x16":  # a TLS hello: answered in plain text, as a lenient service would
            writer.write(b"-ERR unknown command\r\n")
            await writer.drain()
            return
        head = first + await reader.readuntil(b"\r\n\r\n")
        HEADS.append(head)
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
        {"hosts": ["ssh.test"], "ports": [port], "opaque": True, "address_ranges": ["loopback"]},
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
        """`data` sent on a new connection; everything that came back (b"" when the proxy
        ended the connection unread)."""
        try:
            reader, writer = await asyncio.open_unix_connection(str(self.socket_path))
        except ConnectionRefusedError:
            return b""  # the call's network was closed: nobody listens any more
        try:
            writer.write(data)
            await writer.drain()
            return await asyncio.wait_for(reader.read(-1), 30)
        except (ConnectionResetError, BrokenPipeError):
            return b""
        finally:
            writer.close()

    async def get(self, url: str) -> bytes:
        host = url.split("/")[2]
        return await self.send(f"GET {url} HTTP/1.1\r\nhost: {host}\r\n\r\n".encode())


@contextlib.asynccontextmanager
async def _managed_opa(
    tmp_path: Path, port: int, budget: dict[str, int] | None = None
) -> AsyncIterator[tuple[ManagedOpa, OpaPolicyEngine]]:
    """The real OPA with the tests' egress rules (and this budget), and an engine on it."""
    server = ManagedOpa(
        find_opa(None, PROJECT_ROOT), _policies(tmp_path, port, budget), tmp_path / "o" / "s.sock"
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


@pytest_asyncio.fixture
async def opa(
    tmp_path: Path, upstream_port: int
) -> AsyncIterator[tuple[ManagedOpa, OpaPolicyEngine]]:
    async with _managed_opa(tmp_path, upstream_port) as pair:
        yield pair


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
    assert record["bytes_down"] == len(response), "heads count too"
    assert record["bytes_up"] > len(f"GET /a?b=1 HTTP/1.1\r\nhost: up.test:{upstream_port}")
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


def _client_hello(server_name: str | None) -> bytes:
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
        accepted = len(ACCEPTED)
        async with asyncio.timeout(10):
            while len(ACCEPTED) == accepted:  # the hello went on to the server
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
    async with _managed_opa(tmp_path, upstream_port, {"connections": 3, "bytes": 50_000}) as (
        _,
        engine,
    ):
        resolver = Resolver({"up.test": [UPSTREAM]})
        async for proxy in _proxy(tmp_path, engine, resolver):
            small = await proxy.get(f"http://up.test:{upstream_port}/size/1000")
            big = await proxy.get(f"http://up.test:{upstream_port}/size/200000")
            third = await proxy.get(f"http://up.test:{upstream_port}/size/10")
            fourth = await proxy.get(f"http://up.test:{upstream_port}/size/10")
    assert _body(small) == b"x" * 1000
    assert len(_body(big)) < 200_000, "the download stops at the byte budget"
    assert third.startswith(b"HTTP/1.1 403") and b"byte budget" in third
    assert fourth.startswith(b"HTTP/1.1 403")
    assert "byte budget (50000 bytes) is spent" in proxy.egress.note()
    assert sum(r["bytes_down"] for r in proxy.audit) <= 50_000 + 262_144


async def test_connection_budget(tmp_path: Path, upstream_port: int) -> None:
    async with _managed_opa(tmp_path, upstream_port, {"connections": 2, "bytes": 10_000_000}) as (
        _,
        engine,
    ):
        resolver = Resolver({"up.test": [UPSTREAM]})
        async for proxy in _proxy(tmp_path, engine, resolver):
            answers = [await proxy.get(f"http://up.test:{upstream_port}/{i}") for i in range(3)]
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
        # urllib raises ValueError on these: they crashed the task unaudited (attacker round)
        b"GET http://[127.0.0.2/x HTTP/1.1\r\nhost: x\r\n\r\n",
        b"GET http://[vfoo]/ HTTP/1.1\r\nhost: x\r\n\r\n",
        b"GET http://127.0.0.2]/x HTTP/1.1\r\nhost: x\r\n\r\n",
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


async def test_a_call_cannot_hold_more_than_its_share_of_open_connections(
    tmp_path: Path, opa: tuple[ManagedOpa, OpaPolicyEngine]
) -> None:
    """Connections that never send a request are held until the head timeout: past max_open at
    once, new ones are closed at once (the daemon's descriptors are not the sandbox's to use)."""
    audit: list[dict[str, Any]] = []
    proxy = EgressProxy(
        opa[1], audit.append, settings=EgressSettings(max_open=5), resolver=Resolver({})
    )
    egress = proxy.for_call(EgressCall("toolu_egress", CALL))
    socket_path = tmp_path / "proxy.sock"
    async with egress.listen(socket_path):
        idle = [await asyncio.open_unix_connection(str(socket_path)) for _ in range(5)]
        await asyncio.sleep(0.2)
        reader, writer = await asyncio.open_unix_connection(str(socket_path))
        assert await asyncio.wait_for(reader.read(-1), 10) == b""
        writer.close()
        for _, idle_writer in idle:
            idle_writer.close()
    assert "more than 5 connections open at once" in egress.note()


async def test_refusals_close_the_calls_egress_after_a_few(
    tmp_path: Path, opa: tuple[ManagedOpa, OpaPolicyEngine], upstream_port: int
) -> None:
    """A sandbox hammering refused destinations costs the policy engine and the audit a bounded
    number of decisions: after max_refusals every connection ends at once, unread."""
    audit: list[dict[str, Any]] = []
    resolver = Resolver({"other.test": [UPSTREAM]})
    proxy = EgressProxy(
        opa[1], audit.append, settings=EgressSettings(max_refusals=5), resolver=resolver
    )
    egress = proxy.for_call(EgressCall("toolu_egress", CALL))
    socket_path = tmp_path / "proxy.sock"
    async with egress.listen(socket_path):
        client = Proxy(egress, socket_path, audit)
        answers = [await client.get(f"http://other.test:{upstream_port}/{i}") for i in range(12)]
    assert all(a.startswith(b"HTTP/1.1 403") for a in answers[:5])
    assert answers[5:] == [b""] * 7
    # A refused name is never looked up: the lookup alone would carry it (and whatever data it
    # encodes) to outside DNS servers (attacker round: 8-11 KB a call left that way).
    assert resolver.lookups == []
    assert len([r for r in audit if r.get("decision") == "deny"]) == 5
    assert "after 5 refusals the call's network was closed" in egress.note()


async def test_connections_decided_at_once_cannot_exceed_the_budget(
    tmp_path: Path, upstream_port: int
) -> None:
    """The budget is taken when a connection is decided, not when it connects: 20 tunnels
    opened together (each then waiting for its TLS hello) get 3 allowed."""
    async with _managed_opa(tmp_path, upstream_port, {"connections": 3, "bytes": 10_000_000}) as (
        _,
        engine,
    ):
        async for proxy in _proxy(tmp_path, engine, Resolver({"up.test": [UPSTREAM]})):
            opened = [await asyncio.open_unix_connection(str(proxy.socket_path)) for _ in range(20)]
            for _, writer in opened:
                writer.write(f"CONNECT up.test:{upstream_port} HTTP/1.0\r\n\r\n".encode())
            answers = [await asyncio.wait_for(r.read(12), 30) for r, _ in opened]
            for _, writer in opened:
                writer.close()
    assert answers.count(b"HTTP/1.1 200") == 3, answers
    assert answers.count(b"HTTP/1.1 403") == 17


async def test_the_server_sees_the_path_and_framing_that_were_decided(
    tmp_path: Path, opa: tuple[ManagedOpa, OpaPolicyEngine], upstream_port: int
) -> None:
    """Dot segments are resolved before the decision (and sent so), escapes a server could read
    as a dot or slash are refused, methods must be upper case, and a request with both framings
    is refused; a chunked body goes upstream chunked, with no Content-Length."""
    resolver = Resolver({"api.test": [UPSTREAM], "up.test": [UPSTREAM]})
    base = f"http://api.test:{upstream_port}"
    async for proxy in _proxy(tmp_path, opa[1], resolver):
        dotted = await proxy.get(f"{base}/v1/../admin")
        escaped = await proxy.get(f"{base}/v1/%2e%2e/admin")
        lower = await proxy.send(f"get {base}/v1/x HTTP/1.1\r\nhost: api.test\r\n\r\n".encode())
        both = await proxy.send(
            f"GET {base}/v1/x HTTP/1.1\r\nhost: api.test\r\ncontent-length: 4\r\n"
            "transfer-encoding: chunked\r\n\r\n0\r\n\r\n".encode()
        )
        HEADS.clear()
        chunked = await proxy.send(
            f"GET http://up.test:{upstream_port}/v1/./x//y HTTP/1.1\r\nhost: up.test\r\n"
            "transfer-encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n".encode()
        )
    assert dotted.startswith(b"HTTP/1.1 403") and b"GET api.test" in dotted and b"/admin" in dotted
    assert escaped.startswith(b"HTTP/1.1 400")
    assert lower.startswith(b"HTTP/1.1 400") and b"upper case" in lower
    assert both.startswith(b"HTTP/1.1 400") and b"both Content-Length" in both
    assert chunked.startswith(b"HTTP/1.1 200"), chunked
    [head] = HEADS
    assert head.startswith(b"GET /v1/x/y HTTP/1.1\r\n")
    assert b"transfer-encoding: chunked" in head.lower() and b"content-length" not in head.lower()


async def test_tunnels_must_speak_tls_naming_their_host_unless_the_rule_says_opaque(
    tmp_path: Path, opa: tuple[ManagedOpa, OpaPolicyEngine], upstream_port: int
) -> None:
    resolver = Resolver({"up.test": [UPSTREAM], "ssh.test": [UPSTREAM]})
    async for proxy in _proxy(tmp_path, opa[1], resolver):
        no_sni = await proxy.send(
            f"CONNECT up.test:{upstream_port} HTTP/1.0\r\n\r\n".encode() + _client_hello(None)
        )
        plain = await proxy.send(
            f"CONNECT up.test:{upstream_port} HTTP/1.0\r\n\r\nGET /x HTTP/1.1\r\n\r\n".encode()
        )
        opaque = await proxy.send(
            f"CONNECT ssh.test:{upstream_port} HTTP/1.0\r\n\r\n"
            "GET /through HTTP/1.1\r\nhost: ssh.test\r\n\r\n".encode()
        )
    established = b"HTTP/1.1 200 Connection established\r\n\r\n"
    assert no_sni == established and plain == established, "closed, nothing relayed"
    assert b"hello /through" in opaque
    reasons = [" ".join(r.get("reasons", [])) for r in proxy.audit]
    assert any("names no server" in r for r in reasons), reasons
    assert any("did not begin with TLS" in r for r in reasons), reasons


async def test_only_the_containers_root_may_connect(
    tmp_path: Path, opa: tuple[ManagedOpa, OpaPolicyEngine]
) -> None:
    """The forwarder is the container's root; a command reaching the socket itself (any other
    uid) is turned away."""
    folder = Path(tempfile.mkdtemp(prefix="tj-egress-", dir="/tmp"))  # every uid may reach it
    folder.chmod(0o755)
    audit: list[dict[str, Any]] = []
    egress = EgressProxy(opa[1], audit.append, resolver=Resolver({})).for_call(
        EgressCall("toolu_egress", CALL)
    )
    socket_path = folder / "proxy.sock"
    async with egress.listen(socket_path):
        code = (
            "import socket\n"
            "s = socket.socket(socket.AF_UNIX)\n"
            f"s.connect({str(socket_path)!r})\n"
            "try:\n"
            "    s.sendall(b'CONNECT up.test:1 HTTP/1.0\\r\\n\\r\\n')\n"
            "    print(repr(s.recv(100)))\n"
            "except (ConnectionResetError, BrokenPipeError):\n"
            "    print(repr(b''))\n"
        )
        result = await asyncio.create_subprocess_exec(
            "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--",
            sys.executable, "-I", "-c", code, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await result.communicate()
    shutil.rmtree(folder)
    assert out.strip() == b"b''", err
    assert "only the sandbox's forwarder" in egress.note()


async def test_a_hello_in_front_of_another_protocol_is_refused(
    tmp_path: Path, opa: tuple[ManagedOpa, OpaPolicyEngine], upstream_port: int
) -> None:
    """A valid ClientHello followed by plain text, or a server that answers the hello in plain
    text: not TLS the whole way, so the tunnel ends; the plain text never reaches the server."""
    resolver = Resolver({"up.test": [UPSTREAM]})
    async for proxy in _proxy(tmp_path, opa[1], resolver):
        connect = f"CONNECT up.test:{upstream_port} HTTP/1.0\r\n\r\n".encode()
        HEADS.clear()
        smuggled = await proxy.send(connect + _client_hello("up.test") + b"\r\nSET pwned 1\r\n\r\n")
        accepted = len(ACCEPTED)
        plain_server = await proxy.send(connect + _client_hello("up.test"))
    established = b"HTTP/1.1 200 Connection established\r\n\r\n"
    assert smuggled == established and not any(b"pwned" in h for h in HEADS)
    assert plain_server == established, "the plain-text answer is not passed on"
    assert len(ACCEPTED) == accepted + 1
    reasons = " ".join(" ".join(r.get("reasons", [])) for r in proxy.audit)
    assert "something other than TLS records" in reasons
    assert "did not answer the TLS hello with TLS" in reasons


# --- found by the attacker round on the reworked proxy ----------------------------------------


async def test_after_enough_refusals_the_socket_itself_is_gone(
    tmp_path: Path, opa: tuple[ManagedOpa, OpaPolicyEngine], upstream_port: int
) -> None:
    """A process hammering the socket once the call's network is closed costs the daemon
    nothing: the kernel refuses the connections (the accept loop starved the event loop)."""
    resolver = Resolver({"other.test": [UPSTREAM]})
    proxy = EgressProxy(
        opa[1], lambda line: None, settings=EgressSettings(max_refusals=3), resolver=resolver
    )
    egress = proxy.for_call(EgressCall("toolu_egress", CALL))
    socket_path = tmp_path / "proxy.sock"
    async with egress.listen(socket_path):
        client = Proxy(egress, socket_path, [])
        for i in range(3):
            await client.get(f"http://other.test:{upstream_port}/{i}")
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_unix_connection(str(socket_path))


async def test_a_body_in_a_flood_of_tiny_chunks_is_refused(
    tmp_path: Path, opa: tuple[ManagedOpa, OpaPolicyEngine], upstream_port: int
) -> None:
    """Each chunk costs the proxy a round of HTTP parsing: thousands of one-byte chunks a second
    from 60 connections held the GIL and stalled the daemon (attacker round). Such a body ends
    its connection, as a refusal."""
    resolver = Resolver({"up.test": [UPSTREAM]})
    async for proxy in _proxy(tmp_path, opa[1], resolver):
        reader, writer = await asyncio.open_unix_connection(str(proxy.socket_path))
        writer.write(
            f"POST http://up.test:{upstream_port}/x HTTP/1.1\r\nhost: up.test\r\n"
            "transfer-encoding: chunked\r\n\r\n".encode()
        )
        with contextlib.suppress(ConnectionError):
            for _ in range(50):
                writer.write(b"1\r\na\r\n" * 2000)
                await writer.drain()
        try:
            answer = await asyncio.wait_for(reader.read(-1), 30)
        except ConnectionResetError:
            answer = b""  # closed with the rest of the flood unread
        writer.close()
        note = proxy.egress.note()
    assert not answer.startswith(b"HTTP/1.1 200")
    assert "too many small chunks" in note, note


async def test_a_finished_connection_counts_as_open_until_the_sandbox_read_it(
    tmp_path: Path, opa: tuple[ManagedOpa, OpaPolicyEngine], upstream_port: int
) -> None:
    """Bytes sent but not yet read stay in the kernel, charged to the daemon: a connection whose
    answer the sandbox does not read keeps its place among the call's open connections, so
    max_open bounds that memory (finished connections did not count, attacker round)."""
    resolver = Resolver({"up.test": [UPSTREAM]})
    proxy = EgressProxy(
        opa[1], lambda line: None, settings=EgressSettings(max_open=2), resolver=resolver
    )
    egress = proxy.for_call(EgressCall("toolu_egress", CALL))
    socket_path = tmp_path / "proxy.sock"
    async with egress.listen(socket_path):
        held = []
        for _ in range(2):
            reader, writer = await asyncio.open_unix_connection(str(socket_path), limit=1024)
            url = f"http://up.test:{upstream_port}/size/3000000"
            writer.write(f"GET {url} HTTP/1.1\r\nhost: x\r\n\r\n".encode())
            held.append((reader, writer))
        await asyncio.sleep(1.0)  # the exchanges are over on the proxy's side
        reader, writer = await asyncio.open_unix_connection(str(socket_path))
        assert await asyncio.wait_for(reader.read(-1), 10) == b""
        writer.close()
        for _, idle in held:
            idle.close()
    assert "more than 2 connections open at once" in egress.note()


async def test_a_call_holds_at_most_two_lookups_at_once(
    tmp_path: Path, opa: tuple[ManagedOpa, OpaPolicyEngine], upstream_port: int
) -> None:
    """A name whose DNS server never answers blocks a thread per lookup: one call may hold two
    (the others wait, and time out), not the pool every other call shares (attacker round)."""
    running = 0
    most = 0

    async def slow(host: str, port: int) -> list[str]:
        nonlocal running, most
        running += 1
        most = max(most, running)
        try:
            await asyncio.sleep(1.0)
            return [UPSTREAM]
        finally:
            running -= 1

    proxy = EgressProxy(opa[1], lambda line: None, resolver=slow)
    egress = proxy.for_call(EgressCall("toolu_egress", CALL))
    socket_path = tmp_path / "proxy.sock"
    async with egress.listen(socket_path):
        client = Proxy(egress, socket_path, [])
        answers = await asyncio.gather(
            *(client.get(f"http://up.test:{upstream_port}/{i}") for i in range(6))
        )
    assert most == 2
    assert all(answer.startswith(b"HTTP/1.1 200") for answer in answers)


async def test_the_chunk_rate_is_the_calls_not_each_connections(
    tmp_path: Path, opa: tuple[ManagedOpa, OpaPolicyEngine], upstream_port: int
) -> None:
    """A bucket per connection let 60 connections send 950 chunks a second each (57,000 rounds
    of parsing, the daemon stalled: re-check round). Twelve connections sending 500 a second each
    stay under a connection's rate but not under the call's."""
    resolver = Resolver({"up.test": [UPSTREAM]})
    async for proxy in _proxy(tmp_path, opa[1], resolver):

        async def paced(path: Path) -> None:
            _, writer = await asyncio.open_unix_connection(str(path))
            # /slow does not answer at once: the proxy goes on reading (and parsing) the body.
            writer.write(
                f"POST http://up.test:{upstream_port}/slow HTTP/1.1\r\nhost: up.test\r\n"
                "transfer-encoding: chunked\r\n\r\n".encode()
            )
            with contextlib.suppress(ConnectionError):
                for _ in range(40):
                    writer.write(b"1\r\na\r\n" * 50)
                    await writer.drain()
                    await asyncio.sleep(0.1)
            writer.close()

        await asyncio.gather(*(paced(proxy.socket_path) for _ in range(12)))
        note = proxy.egress.note()
    assert "too many small chunks" in note, note
