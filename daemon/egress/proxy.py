"""The egress proxy: each connection a sandbox opens is decided by the policy, then carried.

A call's container reaches the proxy through one Unix socket of its own (see sandbox/hardening.py),
so every connection arriving there belongs to that call: no address or header the sandbox sends
can claim another identity. For each connection the proxy reads the request head (h11), resolves
the name itself, asks the policy (data.tooljail.authz.egress) with the call's context, the
destination and the addresses, and connects to one address in a range the decision allows: the
name is never looked up again (rebinding cannot switch it). CONNECT tunnels carry bytes
untouched after a check that a TLS ClientHello names the host that was decided; destinations
with a configured credential are intercepted instead (TLS terminated with tooljail's CA, each
request decided and given the header). Plain-HTTP requests are decided and relayed one by one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h11

from daemon.egress.addresses import classify
from daemon.egress.ca import EgressCA
from daemon.egress.credentials import Credentials
from daemon.egress.http_relay import (
    CHUNK,
    RelayError,
    has_both_framings,
    read_request,
    refusal_response,
    relay_exchange,
)
from daemon.egress.sni import TLS_HEADER, ClientHelloReader, HelloVerdict, tls_records
from daemon.egress.splice import splice_pump
from daemon.egress.target import (
    Target,
    TargetError,
    normalize_path,
    parse_absolute_url,
    parse_authority,
)
from daemon.egress.usage import CallUsage
from daemon.policy.egress_verdict import EgressVerdict
from daemon.policy.engine import PolicyEngine
from daemon.tools.contract import ProgressSink, ProgressUpdate
from sandbox.backend import EgressGate

EGRESS_INPUT_VERSION = 1
MAX_ADDRESSES = 16

Resolver = Callable[[str, int], Awaitable[list[str]]]
AuditSink = Callable[[dict[str, Any]], None]


async def system_resolver(host: str, port: int) -> list[str]:
    """The addresses the host's resolver gives for `host` (in its order, each once)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))[:MAX_ADDRESSES]


@dataclass(frozen=True)
class EgressSettings:
    """The daemon's ceilings and timeouts for egress (configuration)."""

    max_connections: int = 256
    """Connections per call, whatever the policy says."""
    max_bytes: int = 1 << 30
    """Bytes per call (both directions), whatever the policy says."""
    max_open: int = 64
    """Connections of one call to the proxy open at once (waiting, decided or carrying): more
    are closed at once, so a sandbox cannot run the daemon out of descriptors or memory."""
    max_open_total: int = 1024
    """The same over all calls."""
    max_refusals: int = 64
    """Refusals after which a call's egress is closed (see CallUsage.max_refusals)."""
    head_timeout_s: float = 10.0
    resolve_timeout_s: float = 5.0
    connect_timeout_s: float = 10.0
    hello_timeout_s: float = 10.0


@dataclass(frozen=True)
class EgressCall:
    """One sandboxed call, as its connections are decided and audited."""

    tool_use_id: str
    context: dict[str, Any]
    """The call part of the policy input: tool, tool_use_id, caller, session, command."""
    progress: ProgressSink | None = None


@dataclass
class _Record:
    """What the audit keeps of one connection."""

    tool_use_id: str
    session: str
    principal: str
    started: float = field(default_factory=time.monotonic)
    fields: dict[str, Any] = field(default_factory=dict)
    opaque: bool = False
    """The decision lets a tunnel carry something other than TLS naming its host."""
    bytes_up: int = 0
    bytes_down: int = 0

    def line(self) -> dict[str, Any]:
        return {
            "event": "egress",
            "tool_use_id": self.tool_use_id,
            "session_id": self.session,
            "principal": self.principal,
            **self.fields,
            "bytes_up": self.bytes_up,
            "bytes_down": self.bytes_down,
            "duration_ms": int((time.monotonic() - self.started) * 1000),
        }


def _method(request: h11.Request) -> str:
    """The request's method; refused unless written in upper case (rules name methods so, and
    the server must see the method that was decided)."""
    method = request.method.decode("ascii", "replace")
    if method != method.upper():
        raise _Refused(400, f"method {method!r}: methods are upper case")
    if has_both_framings(request.headers):
        raise _Refused(
            400, "the request has both Content-Length and Transfer-Encoding; send only one"
        )
    return method


class _Ended(Exception):
    """The connection ended before anything was to be carried (not a refusal)."""


class _Refused(Exception):
    """The connection is refused; the message is for the model."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


class EgressProxy:
    """Shared by all calls: the policy engine, the resolver, credentials, the audit."""

    def __init__(
        self,
        engine: PolicyEngine,
        audit: AuditSink,
        *,
        settings: EgressSettings | None = None,
        resolver: Resolver = system_resolver,
        credentials: Credentials | None = None,
        ca: EgressCA | None = None,
        upstream_tls: ssl.SSLContext | None = None,
    ) -> None:
        if credentials is not None and ca is None:
            raise ValueError("intercepting credential destinations needs the CA")
        self.engine = engine
        self.audit = audit
        self.settings = settings or EgressSettings()
        self.resolver = resolver
        self.credentials = credentials
        self.ca = ca
        self.upstream_tls = upstream_tls or ssl.create_default_context()
        self.open_total = 0
        """Sandbox connections open to the proxy now, over all calls."""

    def for_call(self, call: EgressCall) -> CallEgress:
        """The proxy as one call's container sees it."""
        return CallEgress(self, call)


class CallEgress(EgressGate):
    """One call's egress: its socket, counters, refusals and open connections."""

    def __init__(self, proxy: EgressProxy, call: EgressCall) -> None:
        self._proxy = proxy
        self._call = call
        settings = proxy.settings
        self.usage = CallUsage(settings.max_connections, settings.max_bytes, settings.max_refusals)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closing = False

    @contextlib.asynccontextmanager
    async def listen(self, socket_path: Path) -> AsyncIterator[None]:
        server = await asyncio.start_unix_server(self._accept, path=str(socket_path), limit=CHUNK)
        # The container's root connects without any capability over modes, whatever our uid;
        # the folder above keeps every host user but the daemon's out.
        socket_path.chmod(0o666)
        try:
            yield
        finally:
            self._closing = True
            server.close()
            socket_path.unlink(missing_ok=True)
            self.usage.close_all()
            for task in list(self._tasks):
                task.cancel()
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)
            if self.usage.suppressed:
                self._proxy.audit(
                    {
                        **self._record().line(),
                        "end": "closed after too many refusals",
                        "suppressed": self.usage.suppressed,
                    }
                )

    def note(self) -> str:
        """What the model should know about refused destinations ("" when none)."""
        return self.usage.note()

    def _record(self) -> _Record:
        caller = self._call.context.get("caller", {})
        session = self._call.context.get("session", {})
        return _Record(
            self._call.tool_use_id, str(session.get("id", "")), str(caller.get("principal", ""))
        )

    def _turned_away(self, writer: asyncio.StreamWriter) -> str:
        """Why a new connection is ended at once, unread ("" when it is served)."""
        settings = self._proxy.settings
        if self._closing:
            return "the call ended"
        if self.usage.closed_for_refusals:
            self.usage.suppressed += 1
            return "closed"
        if (
            len(self._tasks) >= settings.max_open
            or self._proxy.open_total >= settings.max_open_total
        ):
            return (
                f"more than {settings.max_open} connections open at once (or the daemon's "
                f"{settings.max_open_total} over all calls); wait for some to finish"
            )
        peer = writer.get_extra_info("socket")
        if peer is not None:
            _, uid, _ = struct.unpack(
                "3i", peer.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
            )
            if uid not in (0, os.geteuid()):
                # Only the forwarder (the container's root) connects here; a command reaching
                # the socket itself is refused (it has the forwarder for that).
                return "only the sandbox's forwarder (127.0.0.1:3128) may connect"
        return ""

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if why := self._turned_away(writer):
            if why not in ("closed", "the call ended"):
                self.usage.refuse("(any)", why)
            writer.close()
            return
        self._tasks.add(task)
        self._proxy.open_total += 1
        record = self._record()
        self.usage.track(writer.close)
        try:
            await self._serve(reader, writer, record)
        except _Refused as refused:
            self._refuse(record, writer, refused)
        except _Ended as ended:
            record.fields["end"] = str(ended)
        except (RelayError, OSError, asyncio.IncompleteReadError, ssl.SSLError) as exc:
            record.fields.setdefault("end", f"failed: {exc}")
        except asyncio.CancelledError:
            record.fields.setdefault("end", "the call ended")
        except TimeoutError:
            record.fields.setdefault("end", "timed out")
        finally:
            self._proxy.open_total -= 1
            self.usage.closed(writer.close)
            writer.close()
            self._tasks.discard(task)
            if record.fields:
                self._proxy.audit(record.line())

    def _refuse(self, record: _Record, writer: asyncio.StreamWriter, refused: _Refused) -> None:
        reason = str(refused)
        record.fields.setdefault("decision", "deny")
        record.fields["end"] = "refused"
        record.fields["reasons"] = [reason]
        destination = record.fields.get("destination", "(unreadable request)")
        self.usage.refuse(destination, reason)
        self._progress(f"egress refused: {destination}: {reason}")
        if not writer.is_closing() and refused.status:
            writer.write(refusal_response(refused.status, reason))

    def _progress(self, message: str) -> None:
        if self._call.progress is not None:
            with contextlib.suppress(Exception):
                self._call.progress(ProgressUpdate(message=message))

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: _Record
    ) -> None:
        settings = self._proxy.settings
        try:
            async with asyncio.timeout(settings.head_timeout_s):
                conn, request = await read_request(reader)
        except RelayError as exc:
            raise _Refused(400, f"not a proxy request: {exc}") from exc
        method = _method(request)
        raw_target = request.target.decode("ascii", "replace")
        try:
            if method == "CONNECT":
                target, path = parse_authority(raw_target), ""
            else:
                _, target, path = parse_absolute_url(raw_target)
                path = normalize_path(path)
        except TargetError as exc:
            record.fields["destination"] = raw_target[:200]
            raise _Refused(400, str(exc)) from exc
        record.fields.update(
            destination=target.authority(),
            via="connect" if method == "CONNECT" else "http",
            **({"method": method, "path": path} if method != "CONNECT" else {}),
        )
        if method == "CONNECT":
            await self._tunnel(reader, writer, conn, target, record)
        else:
            address = await self._decide(target, record, kind="http", method=method, path=path)
            upstream = await self._connect(address, target.port, record)
            await self._exchange((reader, writer), conn, request, upstream, target, path, record)

    async def _decide(
        self,
        target: Target,
        record: _Record,
        *,
        kind: str,
        method: str = "",
        path: str = "",
        addresses: list[str] | None = None,
        reserve: bool = True,
    ) -> str:
        """Resolve (unless `addresses` were already), ask the policy, apply the address floor
        and take a connection of the budget (unless `reserve` is off: a request inside a tunnel
        that already has one); the address to use."""
        if addresses is None:
            addresses = await self._resolve(target)
        ranges = [classify(a) for a in addresses]
        record.fields["addresses"] = addresses
        intercepted = self._intercepts(target)
        destination: dict[str, Any] = {
            "via": kind,
            "host": target.host,
            "port": target.port,
            "addresses": [
                {"address": a, "range": r} for a, r in zip(addresses, ranges, strict=True)
            ],
            "intercepted": intercepted,
        }
        if kind == "http":
            scheme = "https" if intercepted else "http"
            destination.update(method=method, path=path, scheme=scheme)
        document = {
            "version": EGRESS_INPUT_VERSION,
            "call": self._call.context,
            "destination": destination,
            "usage": {"connections": self.usage.connections, "bytes": self.usage.bytes},
        }
        verdict = await self._proxy.engine.egress(document)
        record.fields.update(decision_id=verdict.decision_id, reasons=list(verdict.reasons))
        if not verdict.allow:
            raise _Refused(403, " ".join(verdict.reasons))
        self.usage.tighten(verdict.max_connections, verdict.max_bytes)
        allowed = [a for a, r in zip(addresses, ranges, strict=True) if r in verdict.address_ranges]
        if not allowed:
            raise _Refused(403, self._floor_reason(target, addresses, ranges, verdict))
        if reserve and (spent := self.usage.reserve()):
            raise _Refused(403, spent)
        record.fields["decision"] = "allow"
        record.opaque = verdict.opaque
        self._progress(
            f"egress allowed: {kind} {target.authority()}" + (f" {method} {path}" if path else "")
        )
        return allowed[0]

    @staticmethod
    def _floor_reason(
        target: Target, addresses: list[str], ranges: Sequence[str], verdict: EgressVerdict
    ) -> str:
        shown = ", ".join(f"{a} ({r})" for a, r in zip(addresses, ranges, strict=True))
        return (
            f"{target.host} resolved only to addresses the policy does not allow ({shown}); it "
            f"allows {', '.join(sorted(verdict.address_ranges)) or 'none'}"
        )

    def _intercepts(self, target: Target) -> bool:
        credentials = self._proxy.credentials
        return credentials is not None and credentials.intercepts(target.host, target.port)

    async def _resolve(self, target: Target) -> list[str]:
        if target.is_address:
            return [target.host]
        try:
            async with asyncio.timeout(self._proxy.settings.resolve_timeout_s):
                addresses = await self._proxy.resolver(target.host, target.port)
        except (OSError, TimeoutError) as exc:
            raise _Refused(502, f"the name {target.host} could not be resolved ({exc})") from exc
        if not addresses:
            raise _Refused(502, f"the name {target.host} resolved to no address")
        return addresses[:MAX_ADDRESSES]

    async def _connect(
        self,
        address: str,
        port: int,
        record: _Record,
        tls: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        try:
            async with asyncio.timeout(self._proxy.settings.connect_timeout_s):
                reader, writer = await asyncio.open_connection(
                    address, port, ssl=tls, server_hostname=server_hostname, limit=CHUNK
                )
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            raise _Refused(502, f"could not connect to {address} port {port}: {exc}") from exc
        record.fields["connected_to"] = address
        self.usage.track(writer.close)
        return reader, writer

    def _meter(self, record: _Record, up: bool) -> Callable[[int], bool]:
        def count(size: int) -> bool:
            if up:
                record.bytes_up += size
            else:
                record.bytes_down += size
            return self.usage.add_bytes(size)

        return count

    async def _exchange(
        self,
        client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        conn: h11.Connection,
        request: h11.Request,
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        target: Target,
        path: str,
        record: _Record,
        inject: list[tuple[bytes, bytes]] | None = None,
        scrub: list[bytes] | None = None,
    ) -> None:
        default_port = 443 if record.fields.get("intercepted") else 80
        host = target.authority()
        if target.port == default_port:
            host = host.rsplit(":", 1)[0]
        try:
            status = await relay_exchange(
                client,
                conn,
                request,
                upstream,
                target=path.encode("ascii"),
                host=host.encode("ascii"),
                inject=inject or [],
                meter_up=self._meter(record, up=True),
                meter_down=self._meter(record, up=False),
                scrub=scrub or [],
            )
        finally:
            self.usage.closed(upstream[1].close)
            upstream[1].close()
        record.fields.update(status=status, end="done")

    async def _tunnel(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        conn: h11.Connection,
        target: Target,
        record: _Record,
    ) -> None:
        address = await self._decide(target, record, kind="connect")
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        early, _ = conn.trailing_data
        if self._intercepts(target):
            record.fields["intercepted"] = True
            await self._intercept(reader, writer, bytes(early), target, address, record)
            return
        hello = await self._read_hello(reader, bytes(early), target, record)
        upstream = await self._connect_raw(address, target.port, record)
        # The sandbox's side leaves asyncio's transport (paused, never read again) for a
        # descriptor of its own: both directions are then spliced in the kernel, no copy here.
        transport = writer.transport
        assert isinstance(transport, asyncio.Transport)
        transport.pause_reading()
        client = socket.socket(fileno=os.dup(transport.get_extra_info("socket").fileno()))
        client.setblocking(False)

        def close_both() -> None:
            for sock in (client, upstream):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

        self.usage.track(close_both)
        try:
            tls = bool(record.fields.get("tls"))
            # TLS the whole way, not a hello in front of another protocol: what the client
            # sent so far is TLS records, and so is the server's first answer.
            if tls and not tls_records(hello):
                raise _Refused(0, "the tunnel carried something other than TLS records")
            if hello:
                if not self._meter(record, up=True)(len(hello)):
                    return
                await asyncio.get_running_loop().sock_sendall(upstream, hello)
            if tls:
                await self._server_speaks_tls(upstream, client, record)
            await asyncio.gather(
                splice_pump(client, upstream, self._meter(record, up=True)),
                splice_pump(upstream, client, self._meter(record, up=False)),
            )
            record.fields.setdefault("end", "done")
        finally:
            self.usage.closed(close_both)
            self.usage.closed(upstream.close)
            client.close()
            upstream.close()

    async def _server_speaks_tls(
        self, upstream: socket.socket, client: socket.socket, record: _Record
    ) -> None:
        """Read the server's first record header, check that it is TLS (a handshake or an
        alert) and pass it on; a plain-text service behind an allowed port is refused here."""
        loop = asyncio.get_running_loop()
        first = b""
        try:
            async with asyncio.timeout(self._proxy.settings.hello_timeout_s):
                while len(first) < TLS_HEADER:
                    data = await loop.sock_recv(upstream, TLS_HEADER - len(first))
                    if not data:
                        break
                    first += data
        except TimeoutError:
            pass  # silence is not TLS either
        if len(first) < TLS_HEADER or first[0] not in (21, 22) or not tls_records(first):
            raise _Refused(0, "the server did not answer the TLS hello with TLS")
        if self._meter(record, up=False)(len(first)):
            await loop.sock_sendall(client, first)

    async def _connect_raw(self, address: str, port: int, record: _Record) -> socket.socket:
        """A connected, non-blocking socket to address:port (no transport: it is spliced)."""
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            async with asyncio.timeout(self._proxy.settings.connect_timeout_s):
                await asyncio.get_running_loop().sock_connect(sock, (address, port))
        except (OSError, TimeoutError) as exc:
            sock.close()
            raise _Refused(0, f"could not connect to {address} port {port}: {exc}") from exc
        except BaseException:
            sock.close()
            raise
        record.fields["connected_to"] = address
        self.usage.track(sock.close)
        return sock

    async def _read_hello(
        self, reader: asyncio.StreamReader, early: bytes, target: Target, record: _Record
    ) -> bytes:
        """The first bytes of the tunnel: a TLS ClientHello naming the CONNECT host (a name
        needs its server name: without it a shared address could serve another site), or, only
        when the decision says the tunnel may be opaque, anything."""
        hello = ClientHelloReader()
        seen = bytearray(early)
        verdict: HelloVerdict | None = None
        try:
            verdict = hello.feed(early) if early else None
            deadline = asyncio.get_running_loop().time() + self._proxy.settings.hello_timeout_s
            while verdict is None:
                async with asyncio.timeout_at(deadline):
                    data = await reader.read(CHUNK)
                if not data:
                    break
                seen += data
                verdict = hello.feed(data)
        except ValueError as exc:
            raise _Refused(0, f"the tunnel began with a malformed TLS hello ({exc})") from exc
        except TimeoutError:
            pass  # the client waits for the server to speak first: not TLS
        if verdict is None and not seen and reader.at_eof():
            raise _Ended("the client closed the tunnel before sending anything")
        if verdict is None or not verdict.is_tls:
            record.fields["tls"] = False
            if not record.opaque:
                raise _Refused(
                    0,
                    f"the tunnel to {target.authority()} did not begin with TLS; only a rule "
                    'with "opaque": true lets a tunnel carry another protocol',
                )
            return bytes(seen)
        record.fields["tls"] = True
        name = verdict.server_name
        if name is not None:
            record.fields["sni"] = name
        if name is None and not target.is_address:
            raise _Refused(
                0,
                f"the TLS hello names no server; it must name {target.host!r} (the CONNECT host)",
            )
        if name is not None and name.removesuffix(".") != target.host:
            raise _Refused(
                0,
                f"the TLS server name {name!r} differs from the CONNECT host {target.host!r}; "
                "connect to the host you name",
            )
        return bytes(seen)

    async def _intercept(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        early: bytes,
        target: Target,
        address: str,
        record: _Record,
    ) -> None:
        """Terminate the sandbox's TLS with a certificate for the host, decide the request it
        carries, send it on over TLS verified against the system roots with the credential."""
        ca, credentials = self._proxy.ca, self._proxy.credentials
        assert ca is not None and credentials is not None
        if early:
            raise _Refused(0, "the client spoke before the tunnel was established")
        try:
            context = ca.server_context(target.host)
        except ValueError as exc:
            raise _Refused(0, f"cannot present a certificate for {target.host}: {exc}") from exc
        await writer.start_tls(context)
        try:
            async with asyncio.timeout(self._proxy.settings.head_timeout_s):
                conn, request = await read_request(reader)
        except RelayError as exc:
            raise _Refused(400, f"not an HTTP request: {exc}") from exc
        method = _method(request)
        if method in ("TRACE", "TRACK"):
            raise _Refused(403, f"{method} is refused where a credential is added (it echoes it)")
        try:
            path = normalize_path(request.target.decode("ascii", "replace"))
        except TargetError as exc:
            raise _Refused(400, f"inside the tunnel, send requests in origin form: {exc}") from exc
        record.fields.update(method=method, path=path)
        # Each request inside is decided as a request of its own (method and path).
        await self._decide(
            target,
            record,
            kind="http",
            method=method,
            path=path,
            addresses=[address],
            reserve=False,
        )
        upstream = await self._connect(
            address, target.port, record, self._proxy.upstream_tls, target.host
        )
        inject = credentials.headers(target.host, target.port, method, path)
        record.fields["credential"] = bool(inject)
        scrub = credentials.secrets(target.host, target.port)
        await self._exchange(
            (reader, writer), conn, request, upstream, target, path, record, inject, scrub
        )
