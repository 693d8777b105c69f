"""Plain HTTP/1.1 to one OPA server, as the session AsyncOpaClient sends its requests through.

Every decision is one query to OPA, and aiohttp's general client spent 165-190 µs of the daemon's
CPU and four turns of the event loop on each (a task to write the body, then callbacks to reset
its writers). This session speaks only what OPA needs: one request at a time per connection,
a body given whole, a reply read whole (by its Content-Length, chunked, or up to the end), and
kept-alive connections reused only when a reply ended exactly where its length said. A request
that fails or is cancelled part way closes its connection, so an answer can never be read as
the answer to a later query. HTTPS stays with aiohttp (opa_client.client_for).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from daemon.errors import TooljailError

#: Largest reply head (status line and headers) taken from OPA.
MAX_HEAD_BYTES = 64 * 1024
#: Largest reply body taken from OPA: a decision is a few kilobytes; a policy listing more.
MAX_BODY_BYTES = 64 * 1024 * 1024
#: Redirects followed for one request.
MAX_REDIRECTS = 3
#: Idle connections kept for reuse (more are closed when their reply is read).
MAX_IDLE = 16

Connect = Callable[[Callable[[], asyncio.Protocol]], Awaitable[tuple[asyncio.Transport, Any]]]
"""Opens a connection to OPA with a protocol factory (the loop's create_(unix_)connection)."""


class OpaHttpError(TooljailError):
    """OPA's reply was an HTTP error or not HTTP as expected."""


class OpaReply:
    """A reply read whole: what the client library asks of an aiohttp response."""

    def __init__(self, status: int, body: bytes, location: str = "") -> None:
        self.status = status
        self.body = body
        self.location = location
        """Where a redirect points."""

    def raise_for_status(self) -> None:
        if self.status >= 400:
            shown = self.body[:300].decode("utf-8", "replace")
            raise OpaHttpError(f"OPA answered HTTP {self.status}: {shown}")

    async def json(self) -> Any:
        return json.loads(self.body)

    async def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    async def release(self) -> None:
        """Nothing to release: the body was read with the head."""


SEND_SLICE_BYTES = 256 * 1024
"""A request body is handed to the transport this much at a time, each once the last is sent."""


class _Connection(asyncio.Protocol):
    """One connection: bytes received so far, and a way to wait for more."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.received = bytearray()
        self.ended = False
        self.heard = False
        """Whether anything came since the request now on it was sent."""
        self._waiter: asyncio.Future[None] | None = None
        self._paused = False
        self._resumed: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.heard = True
        self.received += data
        self._wake()

    def eof_received(self) -> bool:
        self.ended = True
        self._wake()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.ended = True
        self._wake()
        self.resume_writing()

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        if self._resumed is not None and not self._resumed.done():
            self._resumed.set_result(None)

    async def send(self, data: bytes | bytearray) -> None:
        """Write `data`, a slice at a time once it is large: the transport copies what the
        socket does not take at once, and a large input's document is tens of megabytes
        (attacker round 107: a second copy of one)."""
        assert self.transport is not None
        view = memoryview(data)
        for start in range(0, len(view), SEND_SLICE_BYTES):
            self.transport.write(view[start : start + SEND_SLICE_BYTES])
            while self._paused:
                if self.ended:
                    raise ConnectionResetError("OPA closed the connection while it was sent to")
                self._resumed = asyncio.get_running_loop().create_future()
                try:
                    await self._resumed
                finally:
                    self._resumed = None

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def more(self) -> None:
        """Until more bytes came or the connection ended; raises once it has ended."""
        if self.ended:
            raise ConnectionResetError("OPA closed the connection before its reply was complete")
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    async def take_until(self, marker: bytes, limit: int) -> bytes:
        """The bytes up to and including `marker`, taken from what was received."""
        while (end := self.received.find(marker)) < 0:
            if len(self.received) > limit:
                raise OpaHttpError(f"OPA's reply has no {marker!r} within {limit} bytes")
            await self.more()
        end += len(marker)
        taken = bytes(self.received[:end])
        del self.received[:end]
        return taken

    async def take(self, size: int) -> bytes:
        """Exactly `size` bytes, taken from what was received."""
        while len(self.received) < size:
            await self.more()
        taken = bytes(self.received[:size])
        del self.received[:size]
        return taken

    async def take_rest(self, limit: int) -> bytes:
        """Everything until OPA closes the connection."""
        while not self.ended:
            if len(self.received) > limit:
                raise OpaHttpError(f"OPA's reply is longer than {limit} bytes")
            await self.more()
        taken = bytes(self.received)
        self.received.clear()
        return taken

    def close(self) -> None:
        if self.transport is not None:
            self.transport.abort()
        self.ended = True


async def _read_chunked(connection: _Connection) -> bytes:
    body = bytearray()
    while True:
        line = await connection.take_until(b"\r\n", 1024)
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise OpaHttpError(f"OPA sent a malformed chunk size {line[:40]!r}") from None
        if size == 0:
            while await connection.take_until(b"\r\n", MAX_HEAD_BYTES) != b"\r\n":
                pass  # trailers: none are used
            return bytes(body)
        if size < 0 or len(body) + size > MAX_BODY_BYTES:
            raise OpaHttpError(f"OPA's reply is longer than {MAX_BODY_BYTES} bytes")
        chunk = await connection.take(size + 2)
        if chunk[-2:] != b"\r\n":
            raise OpaHttpError("OPA sent a chunk that does not end where its size says")
        body += chunk[:-2]


async def _read_reply(connection: _Connection, method: str) -> tuple[OpaReply, bool]:
    """The reply, and whether the connection may carry another request."""
    head = await connection.take_until(b"\r\n\r\n", MAX_HEAD_BYTES)
    status_line, *lines = head[:-4].decode("latin-1").split("\r\n")
    version, _, rest = status_line.partition(" ")
    code = rest[:3]
    if not version.startswith("HTTP/1.") or not code.isdigit():
        raise OpaHttpError(f"OPA sent no HTTP status line: {status_line[:80]!r}")
    status = int(code)
    headers: dict[str, str] = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    reusable = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
    if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
        body = b""
    elif "chunked" in headers.get("transfer-encoding", "").lower():
        body = await _read_chunked(connection)
    elif (length := headers.get("content-length")) is not None:
        if not length.isdigit() or int(length) > MAX_BODY_BYTES:
            raise OpaHttpError(f"OPA sent an unusable Content-Length {length[:40]!r}")
        body = await connection.take(int(length))
    else:
        body = await connection.take_rest(MAX_BODY_BYTES)
        reusable = False
    # Bytes past the reply's end would be read as the next request's answer: never reused then.
    reusable = reusable and not connection.received and not connection.ended
    return OpaReply(status, body, headers.get("location", "")), reusable


class OpaHttpSession:
    """The part of aiohttp.ClientSession that AsyncOpaClient uses, for plain HTTP to one OPA."""

    def __init__(
        self,
        connect: Connect,
        host: str,
        headers: dict[str, str],
        encode_json: Callable[[Any], bytes | bytearray],
        timeout_s: float | None,
    ) -> None:
        self._connect = connect
        self._host = host
        self._headers = headers
        self._encode_json = encode_json
        self._timeout_s = timeout_s
        self._idle: list[_Connection] = []
        self._busy: set[_Connection] = set()
        self.closed = False

    async def request(
        self,
        method: str,
        url: str,
        *,
        json: Any = None,
        data: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> OpaReply:
        if self.closed:
            raise OpaHttpError("the OPA session is closed")
        body = self._encode_json(json) if json is not None else (data or b"")
        fields = {**self._headers, **(headers or {})}
        if json is not None:
            fields.setdefault("Content-Type", "application/json")
        if body or method in ("POST", "PUT", "PATCH"):
            fields["Content-Length"] = str(len(body))
        parts = urlsplit(url)
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        async with asyncio.timeout(self._timeout_s):
            for _ in range(MAX_REDIRECTS + 1):
                reply = await self._exchange(method, self._message(method, target, fields), body)
                # OPA redirects a GET of /v1/policies/ to /v1/policies (the library asks for the
                # former, and aiohttp followed it); only a path on this same server is followed.
                moved = reply.status in (301, 302, 307, 308) and method == "GET"
                if not moved or not reply.location.startswith("/"):
                    return reply
                target = reply.location
        raise OpaHttpError(f"OPA redirected {method} {url} more than {MAX_REDIRECTS} times")

    def _message(self, method: str, target: str, fields: dict[str, str]) -> bytes:
        head = [f"{method} {target} HTTP/1.1", f"Host: {self._host}"]
        head += [f"{name}: {value}" for name, value in fields.items()]
        return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")

    async def _exchange(self, method: str, message: bytes, body: bytes | bytearray) -> OpaReply:
        while self._idle:
            connection = self._idle.pop()
            if connection.ended or connection.received:
                # Bytes that came while it was idle answer nothing asked (round 102's lead).
                connection.close()
                continue
            try:
                return await self._on(connection, method, message, body)
            except ConnectionError:
                if connection.heard:
                    raise
                # OPA closed this kept-alive connection while it was idle, before any byte of a
                # reply: the request goes again on another (a query changes nothing).
                continue
        return await self._on(await self._open(), method, message, body)

    async def _open(self) -> _Connection:
        _, connection = await self._connect(_Connection)
        assert isinstance(connection, _Connection)
        return connection

    async def _on(
        self, connection: _Connection, method: str, message: bytes, body: bytes | bytearray
    ) -> OpaReply:
        assert connection.transport is not None
        self._busy.add(connection)
        reusable = False
        try:
            connection.heard = False
            connection.transport.write(message)
            if body:
                await connection.send(body)
            reply, reusable = await _read_reply(connection, method)
            return reply
        finally:
            self._busy.discard(connection)
            if reusable and not self.closed and len(self._idle) < MAX_IDLE:
                self._idle.append(connection)
            else:
                connection.close()

    async def close(self) -> None:
        self.closed = True
        for connection in (*self._idle, *self._busy):
            connection.close()
        self._idle.clear()
        self._busy.clear()


def unix_connect(path: str) -> Connect:
    """Connections to OPA's Unix socket."""

    async def connect(factory: Callable[[], asyncio.Protocol]) -> tuple[asyncio.Transport, Any]:
        loop = asyncio.get_running_loop()
        transport, protocol = await loop.create_unix_connection(factory, path)
        return transport, protocol

    return connect


def tcp_connect(host: str, port: int) -> Connect:
    """Plain TCP connections to OPA."""

    async def connect(factory: Callable[[], asyncio.Protocol]) -> tuple[asyncio.Transport, Any]:
        loop = asyncio.get_running_loop()
        # asyncio sets TCP_NODELAY on TCP connections: a query is not held back for an ACK.
        transport, protocol = await loop.create_connection(factory, host, port)
        return transport, protocol

    return connect


__all__ = ["OpaHttpError", "OpaHttpSession", "OpaReply", "tcp_connect", "unix_connect"]
