"""The egress proxy: each connection a sandbox opens is decided by the policy, then carried.

A call's container reaches the proxy through one Unix socket of its own (see sandbox/hardening.py),
so every connection arriving there belongs to that call: no address or header the sandbox sends
can claim another identity. For each connection the proxy reads the request head (h11), asks the
policy (data.tooljail.authz.egress) with the call's context and the destination, then resolves an
allowed name itself (a refused one is never looked up: DNS would carry it out) and connects to
one address in a range the decision allows: the name is never looked up again (rebinding cannot
switch it). CONNECT tunnels carry bytes untouched after a check that a TLS ClientHello names the
host that was decided (tunnel.py); destinations with a configured credential are intercepted
instead (TLS terminated with tooljail's CA, each request decided and given the header).
Plain-HTTP requests are decided and relayed one by one (http_relay.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import logging
import os
import socket
import ssl
import struct
import termios
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h11

from daemon.egress.addresses import classify
from daemon.egress.ca import EgressCA
from daemon.egress.credentials import Credentials
from daemon.egress.http_relay import (
    ChunkFlood,
    ChunkRate,
    RelayError,
    has_both_framings,
    read_head,
    read_request,
    refusal_response,
    relay_exchange,
)
from daemon.egress.record import ConnectionRecord, Ended, Refused
from daemon.egress.streams import ByteStream, PlainStream, TlsStream, in_thread, shutter
from daemon.egress.target import (
    Target,
    TargetError,
    normalize_path,
    parse_absolute_url,
    parse_authority,
)
from daemon.egress.tunnel import carry_tunnel, read_hello
from daemon.egress.usage import CallUsage
from daemon.policy.egress_verdict import EgressVerdict
from daemon.policy.engine import PolicyEngine
from daemon.tools.contract import ProgressSink, ProgressUpdate
from sandbox.backend import EgressGate

log = logging.getLogger(__name__)

EGRESS_INPUT_VERSION = 1
MAX_ADDRESSES = 16
ACCEPTS_PER_TURN = 16
"""Connections accepted per wake-up of the listener (a flood must not hold the event loop)."""
SANDBOX_SEND_BUFFER = 1 << 20
"""The send buffer of an intercepted connection (the kernel doubles it). The default (about
200 KiB) is less than one body piece the proxy writes, so the proxy and the sandbox's client
took turns waiting on each other; measured, a bigger one raises intercepted downloads by a third.
Bytes not yet read stay charged to the daemon: a connection keeps its place among the call's
open ones until they are read (`_until_read`), so the open-connection limits bound them."""
_DRAIN_POLL_S = 0.05

Resolver = Callable[[str, int], Awaitable[list[str]]]
AuditSink = Callable[[dict[str, Any]], None]


_DNS_THREADS = ThreadPoolExecutor(16, thread_name_prefix="tooljail-dns")
"""Lookups block a thread for as long as a slow DNS server takes: egress lookups get threads of
their own, so they never hold up the daemon's other work in asyncio's shared pool."""
LOOKUPS_PER_CALL = 2
"""Lookups one call may have running at once (the rest of the threads stay for other calls)."""


async def system_resolver(host: str, port: int) -> list[str]:
    """The addresses the host's resolver gives for `host` (in its order, each once)."""
    infos = await asyncio.get_running_loop().run_in_executor(
        _DNS_THREADS, functools.partial(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM)
    )
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


def _method(request: h11.Request) -> str:
    """The request's method; refused unless written in upper case (rules name methods so, and
    the server must see the method that was decided)."""
    method = request.method.decode("ascii", "replace")
    if method != method.upper():
        raise Refused(400, f"method {method!r}: methods are upper case")
    if has_both_framings(request.headers):
        raise Refused(
            400, "the request has both Content-Length and Transfer-Encoding; send only one"
        )
    return method


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
    """One call's egress: its socket, counters, refusals and open connections.

    Connections are plain sockets from accept on (no asyncio stream buffering bytes the proxy
    has not seen): heads are read on the event loop, tunnels spliced by the kernel, and
    exchanges whose bytes are read (plain HTTP, intercepted TLS) carried in worker threads."""

    def __init__(self, proxy: EgressProxy, call: EgressCall) -> None:
        self._proxy = proxy
        self._call = call
        settings = proxy.settings
        self.usage = CallUsage(settings.max_connections, settings.max_bytes, settings.max_refusals)
        self._listener: socket.socket | None = None
        self._lookups = asyncio.Semaphore(LOOKUPS_PER_CALL)
        self._chunks = ChunkRate()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closing = False
        self._forwarder_uid = 0

    @contextlib.asynccontextmanager
    async def listen(self, socket_path: Path, forwarder_uid: int = 0) -> AsyncIterator[None]:
        self._forwarder_uid = forwarder_uid
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.setblocking(False)
            listener.bind(str(socket_path))
            # The container's root connects without any capability over modes, whatever our
            # uid; the folder above keeps every host user but the daemon's out.
            socket_path.chmod(0o666)
            listener.listen(128)
        except BaseException:
            listener.close()
            raise
        self._listener = listener
        self._watch(listener)
        try:
            yield
        finally:
            self._closing = True
            if listener.fileno() >= 0:
                asyncio.get_running_loop().remove_reader(listener.fileno())
            listener.close()
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

    def _accept_ready(self, listener: socket.socket) -> None:
        """Accept every pending connection (called by the loop when the listener is readable;
        synchronous, so no accepted socket can be lost to a cancellation)."""
        loop = asyncio.get_running_loop()
        for _ in range(ACCEPTS_PER_TURN):  # the loop's other work gets its turn in between
            if self._closing:
                return
            if self.usage.closed_for_refusals:
                self._stop_listening()
                return
            try:
                client, _ = listener.accept()
            except BlockingIOError:
                return
            except OSError:
                # Out of descriptors, say: the pending connections wait in the backlog, and
                # the listener is watched again in a moment (not at once: it stays readable).
                loop.remove_reader(listener.fileno())
                loop.call_later(0.05, self._watch, listener)
                return
            client.setblocking(False)
            if why := self._turned_away(client):
                if why not in ("closed", "the call ended"):
                    self._refused("(any)", why)
                client.close()
                continue
            self._proxy.open_total += 1
            task = asyncio.create_task(self._handle(client))
            self._tasks.add(task)
            task.add_done_callback(functools.partial(self._finished, client))

    def _finished(self, client: socket.socket, task: asyncio.Task[None]) -> None:
        """A connection's task is over (even one cancelled before it ever ran, which never
        reached its own `finally`)."""
        self._tasks.discard(task)
        self._proxy.open_total -= 1
        client.close()

    def _stop_listening(self) -> None:
        """The call's network is closed: no more listening, so the kernel refuses further
        connections without waking the daemon (a process hammering the socket starved it)."""
        listener = self._listener
        if listener is not None and listener.fileno() >= 0:
            asyncio.get_running_loop().remove_reader(listener.fileno())
            listener.close()

    def _refused(self, destination: str, reason: str) -> None:
        self.usage.refuse(destination, reason)
        if self.usage.closed_for_refusals:
            self._stop_listening()

    def _watch(self, listener: socket.socket) -> None:
        if not self._closing and listener.fileno() >= 0:
            asyncio.get_running_loop().add_reader(listener.fileno(), self._accept_ready, listener)

    def _record(self) -> ConnectionRecord:
        caller = self._call.context.get("caller", {})
        session = self._call.context.get("session", {})
        return ConnectionRecord(
            self._call.tool_use_id, str(session.get("id", "")), str(caller.get("principal", ""))
        )

    def _turned_away(self, client: socket.socket) -> str:
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
        _, uid, _ = struct.unpack(
            "3i", client.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
        )
        if uid not in (self._forwarder_uid, os.geteuid()):
            # Only the forwarder (the container's root) connects here; a command reaching
            # the socket itself is refused (it has the forwarder for that). In a container
            # with no root, the forwarder and the command are one uid: a direct connection
            # carries what the forwarder would, byte for byte.
            return "only the sandbox's forwarder (127.0.0.1:3128) may connect"
        return ""

    async def _handle(self, client: socket.socket) -> None:
        record = self._record()
        close = shutter(client)
        self.usage.track(close)
        try:
            await self._serve(client, record)
        except Refused as refused:
            await self._refuse(record, client, refused)
        except Ended as ended:
            record.fields["end"] = str(ended)
        except ChunkFlood as flood:  # counted as a refusal: a sandbox repeating it gets closed
            record.fields["end"] = "refused"
            self._refused(record.fields.get("destination", "(unreadable request)"), str(flood))
        except TimeoutError:  # before OSError, of which it is one
            record.fields.setdefault("end", "timed out")
        except (RelayError, OSError, ssl.SSLError) as exc:
            record.fields.setdefault("end", f"failed: {exc}")
        except asyncio.CancelledError:
            record.fields.setdefault("end", "the call ended")
        except Exception as exc:  # noqa: BLE001 - a bug here must still end in the audit
            record.fields.setdefault("end", f"failed: internal error ({type(exc).__name__})")
            log.warning("egress connection failed unexpectedly: %r", exc)
        try:
            await self._until_read(client)
        except asyncio.CancelledError:
            record.fields.setdefault("end", "the call ended")
        finally:
            self.usage.closed(close)
            client.close()
            if record.fields:
                self._proxy.audit(record.line())

    async def _until_read(self, client: socket.socket) -> None:
        """Wait while the sandbox has not read all that was sent to it: those bytes stay in
        the kernel, charged to the daemon, and this connection keeps its place among the call's
        open ones meanwhile (the call's end stops the wait)."""
        while not self._closing and client.fileno() >= 0:
            try:
                queued = struct.unpack(
                    "i", fcntl.ioctl(client.fileno(), termios.TIOCOUTQ, b"\0\0\0\0")
                )[0]
            except OSError:
                return
            if queued <= 0:
                return
            await asyncio.sleep(_DRAIN_POLL_S)

    async def _refuse(
        self, record: ConnectionRecord, client: socket.socket, refused: Refused
    ) -> None:
        reason = str(refused)
        record.fields.setdefault("decision", "deny")
        record.fields["end"] = "refused"
        record.fields["reasons"] = [reason]
        destination = record.fields.get("destination", "(unreadable request)")
        self._refused(destination, reason)
        self._progress(f"egress refused: {destination}: {reason}")
        # Only while the socket is still the event loop's (not handed to a thread, nor TLS).
        if refused.status and client.fileno() >= 0 and client.gettimeout() == 0:
            answer = refusal_response(refused.status, reason)
            with contextlib.suppress(OSError, TimeoutError):
                async with asyncio.timeout(self._proxy.settings.head_timeout_s):
                    await asyncio.get_running_loop().sock_sendall(client, answer)

    def _progress(self, message: str) -> None:
        if self._call.progress is not None:
            with contextlib.suppress(Exception):
                self._call.progress(ProgressUpdate(message=message))

    async def _serve(self, client: socket.socket, record: ConnectionRecord) -> None:
        settings = self._proxy.settings
        try:
            async with asyncio.timeout(settings.head_timeout_s):
                conn, request = await read_head(client)
        except RelayError as exc:
            raise Refused(400, f"not a proxy request: {exc}") from exc
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
            raise Refused(400, str(exc)) from exc
        record.fields.update(
            destination=target.authority(),
            via="connect" if method == "CONNECT" else "http",
            **({"method": method, "path": path} if method != "CONNECT" else {}),
        )
        if method == "CONNECT":
            await self._tunnel(client, conn, target, record)
            return
        address = await self._decide(target, record, kind="http", method=method, path=path)
        async with self._connected(address, target.port, record) as upstream:
            await self._exchange(
                PlainStream(client), conn, request, PlainStream(upstream), target, path, record
            )

    async def _decide(
        self,
        target: Target,
        record: ConnectionRecord,
        *,
        kind: str,
        method: str = "",
        path: str = "",
        addresses: list[str] | None = None,
        reserve: bool = True,
    ) -> str:
        """Ask the policy, then resolve a name (unless `addresses` were already: a request
        inside a tunnel), apply the address floor and take a connection of the budget (unless
        `reserve` is off: a request inside a tunnel that already has one); the address to use.

        A name is resolved only once the policy allowed it: a lookup of a refused name would
        still carry it, and whatever data it encodes, to outside DNS servers."""
        known = addresses if addresses is not None else [target.host] if target.is_address else []
        intercepted = self._intercepts(target)
        destination: dict[str, Any] = {
            "via": kind,
            "host": target.host,
            "port": target.port,
            "addresses": [{"address": a, "range": classify(a)} for a in known],
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
            raise Refused(403, " ".join(verdict.reasons))
        self.usage.tighten(verdict.max_connections, verdict.max_bytes)
        addresses = known or await self._resolve(target)
        record.fields["addresses"] = addresses
        ranges = [classify(a) for a in addresses]
        allowed = [a for a, r in zip(addresses, ranges, strict=True) if r in verdict.address_ranges]
        if not allowed:
            raise Refused(403, self._floor_reason(target, addresses, ranges, verdict))
        if reserve and (spent := self.usage.reserve()):
            raise Refused(403, spent)
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
            async with asyncio.timeout(self._proxy.settings.resolve_timeout_s), self._lookups:
                addresses = await self._proxy.resolver(target.host, target.port)
        except (OSError, TimeoutError) as exc:
            raise Refused(502, f"the name {target.host} could not be resolved ({exc})") from exc
        if not addresses:
            raise Refused(502, f"the name {target.host} resolved to no address")
        return addresses[:MAX_ADDRESSES]

    @contextlib.asynccontextmanager
    async def _connected(
        self, address: str, port: int, record: ConnectionRecord
    ) -> AsyncIterator[socket.socket]:
        """A connected, non-blocking socket to address:port, shut with the call's others."""
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        close = shutter(sock)
        try:
            sock.setblocking(False)
            try:
                async with asyncio.timeout(self._proxy.settings.connect_timeout_s):
                    await asyncio.get_running_loop().sock_connect(sock, (address, port))
            except (OSError, TimeoutError) as exc:
                raise Refused(502, f"could not connect to {address} port {port}: {exc}") from exc
            record.fields["connected_to"] = address
            self.usage.track(close)
            yield sock
        finally:
            self.usage.closed(close)
            sock.close()

    def _meter(self, record: ConnectionRecord, up: bool) -> Callable[[int], bool]:
        def count(size: int) -> bool:
            if up:
                record.bytes_up += size
            else:
                record.bytes_down += size
            return self.usage.add_bytes(size)

        return count

    async def _exchange(
        self,
        client: ByteStream,
        conn: h11.Connection,
        request: h11.Request,
        upstream: ByteStream,
        target: Target,
        path: str,
        record: ConnectionRecord,
        inject: list[tuple[bytes, bytes]] | None = None,
        scrub: list[bytes] | None = None,
    ) -> None:
        default_port = 443 if record.fields.get("intercepted") else 80
        host = target.authority()
        if target.port == default_port:
            host = host.rsplit(":", 1)[0]
        meter_up, meter_down = self._meter(record, up=True), self._meter(record, up=False)

        def relay() -> int:
            status = relay_exchange(
                client,
                conn,
                request,
                upstream,
                target=path.encode("ascii"),
                host=host.encode("ascii"),
                inject=inject or [],
                meter_up=meter_up,
                meter_down=meter_down,
                chunks=self._chunks,
                scrub=scrub or [],
            )
            # Here, not after the await: a call that ends as the exchange does cancels the wait,
            # and its record would lose the status of an exchange that was carried whole.
            record.fields["status"] = status
            return status

        await in_thread(relay, interrupt=shutter(client.sock, upstream.sock))
        record.fields["end"] = "done"

    async def _tunnel(
        self,
        client: socket.socket,
        conn: h11.Connection,
        target: Target,
        record: ConnectionRecord,
    ) -> None:
        settings = self._proxy.settings
        address = await self._decide(target, record, kind="connect")
        loop = asyncio.get_running_loop()
        await loop.sock_sendall(client, b"HTTP/1.1 200 Connection established\r\n\r\n")
        early, _ = conn.trailing_data
        if self._intercepts(target):
            record.fields["intercepted"] = True
            await self._intercept(client, bytes(early), target, address, record)
            return
        hello = await read_hello(client, bytes(early), target, record, settings.hello_timeout_s)
        async with self._connected(address, target.port, record) as upstream:
            await carry_tunnel(
                client,
                upstream,
                hello,
                record,
                meter_up=self._meter(record, up=True),
                meter_down=self._meter(record, up=False),
                timeout_s=settings.hello_timeout_s,
            )

    async def _intercept(
        self,
        client: socket.socket,
        early: bytes,
        target: Target,
        address: str,
        record: ConnectionRecord,
    ) -> None:
        """Terminate the sandbox's TLS with a certificate for the host; a refusal from then on
        is answered inside that TLS."""
        ca, settings = self._proxy.ca, self._proxy.settings
        assert ca is not None
        if early:
            raise Refused(0, "the client spoke before the tunnel was established")
        try:
            context = ca.server_context(target.host)
        except ValueError as exc:
            raise Refused(0, f"cannot present a certificate for {target.host}: {exc}") from exc

        with contextlib.suppress(OSError):
            client.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SANDBOX_SEND_BUFFER)

        def accept() -> TlsStream:
            return TlsStream(client, context, server_side=True, timeout=settings.head_timeout_s)

        async with asyncio.timeout(settings.head_timeout_s):
            sandbox = await in_thread(accept, interrupt=shutter(client))
        try:
            await self._intercepted_request(sandbox, target, address, record)
        except Refused as refused:
            if refused.status:
                answer = refusal_response(refused.status, str(refused))
                sandbox.settimeout(settings.head_timeout_s)
                with contextlib.suppress(OSError, ssl.SSLError):
                    await in_thread(
                        lambda: sandbox.sendall(answer), interrupt=shutter(sandbox.sock)
                    )
            raise Refused(0, str(refused)) from refused

    async def _intercepted_request(
        self, sandbox: TlsStream, target: Target, address: str, record: ConnectionRecord
    ) -> None:
        """Decide the request the sandbox sent inside the intercepted tunnel and send it on
        over TLS verified against the system roots, with the credential."""
        proxy = self._proxy
        credentials, settings = proxy.credentials, proxy.settings
        assert credentials is not None
        try:
            async with asyncio.timeout(settings.head_timeout_s):
                conn, request = await in_thread(
                    lambda: read_request(sandbox), interrupt=shutter(sandbox.sock)
                )
        except RelayError as exc:
            raise Refused(400, f"not an HTTP request: {exc}") from exc
        sandbox.settimeout(None)
        method = _method(request)
        if method in ("TRACE", "TRACK"):
            raise Refused(403, f"{method} is refused where a credential is added (it echoes it)")
        try:
            path = normalize_path(request.target.decode("ascii", "replace"))
        except TargetError as exc:
            raise Refused(400, f"inside the tunnel, send requests in origin form: {exc}") from exc
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
        async with self._connected(address, target.port, record) as raw:

            def handshake() -> TlsStream:
                try:
                    stream = TlsStream(
                        raw,
                        proxy.upstream_tls,
                        server_side=False,
                        server_hostname=target.host,
                        timeout=settings.connect_timeout_s,
                    )
                except (OSError, ssl.SSLError) as exc:
                    raise Refused(
                        502, f"could not connect to {address} port {target.port}: {exc}"
                    ) from exc
                stream.settimeout(None)
                return stream

            upstream = await in_thread(handshake, interrupt=shutter(raw))
            inject = credentials.headers(target.host, target.port, method, path)
            record.fields["credential"] = bool(inject)
            scrub = credentials.secrets(target.host, target.port)
            await self._exchange(
                sandbox, conn, request, upstream, target, path, record, inject, scrub
            )
