"""Carrying one HTTP/1.1 exchange between a sandbox and a server, parsed by h11 on both sides.

h11 (a small, well-kept, sans-I/O HTTP/1.1 implementation) does all the parsing and framing: the
proxy never splits a request line or a chunked body itself, so a sandbox cannot smuggle a second
request past the one that was decided. Hop-by-hop headers and the sandbox's own proxy
credentials are dropped; a configured credential is added on the way out. Each exchange ends the
connection (Connection: close both ways): the next request is a new connection and a new
decision.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Sequence
from urllib.parse import quote, quote_plus

import h11

from daemon.egress.streams import ByteStream

CHUNK = 1 << 18
CHUNK_BURST = 4096
CHUNKS_PER_S = 1000
"""Body pieces (chunked framing) a call's exchanges may carry: a burst, then this many a second.
Streaming answers (server-sent events, say) send tens a second; a flood sends thousands."""
#: Longest request or response head (line and headers) accepted.
MAX_HEAD = 64 * 1024

Headers = list[tuple[bytes, bytes]]
Meter = Callable[[int], bool]
"""Counts bytes carried; False when the call's byte budget is spent (the exchange stops)."""

_HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"proxy-connection",
        b"keep-alive",
        b"proxy-authorization",
        b"proxy-authenticate",
        b"te",
        b"trailer",
        b"upgrade",
    }
)


class RelayError(Exception):
    """The exchange could not be carried (malformed message, peer gone, budget spent)."""


class ChunkFlood(RelayError):
    """A body came in more pieces, faster, than any client needs: each costs a round of parsing
    (in a thread that shares the interpreter with the daemon), so the exchange is ended."""


class ChunkRate:
    """The body pieces (chunked framing) one call's exchanges may carry, all connections
    together: CHUNK_BURST at once, then CHUNKS_PER_S a second (a token bucket, shared by the
    call's worker threads: a bucket per connection let 60 connections parse 57,000 a second)."""

    def __init__(self) -> None:
        self._tokens = float(CHUNK_BURST)
        self._at = time.monotonic()
        self._lock = threading.Lock()

    def take(self, who: str) -> None:
        """Count one piece `who` (the sandbox, the server) sent; ChunkFlood past the rate."""
        with self._lock:
            now = time.monotonic()
            self._tokens = min(CHUNK_BURST, self._tokens + (now - self._at) * CHUNKS_PER_S)
            self._at = now
            self._tokens -= 1
            flooded = self._tokens < 0
        if flooded:
            raise ChunkFlood(
                f"the {who} sent bodies in too many small chunks (the call's connections may "
                f"carry {CHUNKS_PER_S} a second together); send larger chunks"
            )


def _forwarded(headers: Sequence[tuple[bytes, bytes]], drop: frozenset[bytes]) -> Headers:
    listed = {
        token.strip().lower()
        for name, value in headers
        if name.lower() == b"connection"
        for token in value.split(b",")
    }
    return [
        (name, value)
        for name, value in headers
        if name.lower() not in _HOP_BY_HOP
        and name.lower() not in drop
        and name.lower() not in listed
    ]


_FRAMING = frozenset({b"content-length", b"transfer-encoding"})


def has_both_framings(headers: Sequence[tuple[bytes, bytes]]) -> bool:
    """Content-Length and Transfer-Encoding together: servers disagree on which wins (request
    smuggling), so such a request is refused."""
    names = {name.lower() for name, _ in headers}
    return names >= _FRAMING


def _encoded(headers: Sequence[tuple[bytes, bytes]]) -> bool:
    """The body is content-encoded (compressed, say) rather than identity."""
    return any(
        name.lower() == b"content-encoding" and value.strip().lower() not in (b"", b"identity")
        for name, value in headers
    )


def _framing(headers: Sequence[tuple[bytes, bytes]]) -> Headers:
    """The body's framing as h11 understood it, said once: chunked, or one Content-Length."""
    names = {name.lower(): value for name, value in headers}
    if b"transfer-encoding" in names:
        return [(b"transfer-encoding", b"chunked")]
    if b"content-length" in names:
        return [(b"content-length", names[b"content-length"])]
    return []


def request_headers(
    headers: Sequence[tuple[bytes, bytes]], host: bytes, inject: Sequence[tuple[bytes, bytes]]
) -> Headers:
    """The headers sent upstream: the decided Host, the sandbox's end-to-end headers (any it sent
    under an injected name dropped), the body's framing once, and the injected ones."""
    drop = {b"host", *_FRAMING, *(name.lower() for name, _ in inject)}
    identity: Headers = []
    if inject:
        # A compressed answer would carry an echoed secret past the scrubber.
        drop.add(b"accept-encoding")
        identity = [(b"accept-encoding", b"identity")]
    return [
        (b"host", host),
        *_forwarded(headers, frozenset(drop)),
        *_framing(headers),
        *identity,
        *inject,
        (b"connection", b"close"),
    ]


def secret_forms(secrets: Sequence[bytes]) -> list[bytes]:
    """Each secret as an echo may spell it: as is, URL-encoded (both ways) and JSON-escaped.
    Best effort: a server that transforms what it echoes otherwise can still reveal it."""
    forms: list[bytes] = []
    for secret in secrets:
        if not secret:
            continue
        text = secret.decode("latin-1")
        for form in (
            secret,
            quote(text, safe="").encode("latin-1"),
            quote_plus(text, safe="").encode("latin-1"),
            secret.replace(b"/", b"\\/"),
        ):
            if form not in forms:
                forms.append(form)
    return forms


def hide_secrets(data: bytes, secrets: Sequence[bytes]) -> bytes:
    """`data` with every secret replaced by as many '*'."""
    for secret in secrets:
        if secret:
            data = data.replace(secret, b"*" * len(secret))
    return data


class Scrubber:
    """Replaces secrets in a stream by as many '*' (the length stays, so the framing does):
    a server that echoes the request (TRACE, a debug page) must not hand the sandbox the
    credential the proxy added."""

    def __init__(self, secrets: Sequence[bytes]) -> None:
        self._forms = secret_forms(secrets)
        self.keep = max((len(form) for form in self._forms), default=1) - 1
        """Bytes a stream must hold back at the end of a piece: a secret may straddle two."""
        self._carry = bytearray()

    def scrub(self, data: bytearray, end: int) -> None:
        """Replace, in place, every secret lying wholly inside data[:end] (no copy: the body
        copier scrubs its read buffer)."""
        for form in self._forms:
            at = data.find(form, 0, end)
            while at >= 0:
                data[at : at + len(form)] = b"*" * len(form)
                at = data.find(form, at + len(form), end)

    def feed(self, data: bytes) -> bytes:
        """`data` scrubbed; the last `keep` bytes are held back until the next call."""
        if not self._forms:
            return data
        buffer = self._carry + data
        self.scrub(buffer, len(buffer))
        cut = max(len(buffer) - self.keep, 0)
        self._carry = buffer[cut:]
        return bytes(buffer[:cut])

    def flush(self) -> bytes:
        """What was held back (at the end of the stream)."""
        rest, self._carry = bytes(self._carry), bytearray()
        return rest


def _next_event(conn: h11.Connection) -> h11.Event | type:
    try:
        return conn.next_event()
    except h11.RemoteProtocolError as exc:
        raise RelayError(f"malformed HTTP: {exc}") from exc


def _receive(conn: h11.Connection, data: bytes) -> None:
    try:
        conn.receive_data(data)
    except h11.RemoteProtocolError as exc:
        raise RelayError(f"malformed HTTP: {exc}") from exc


def _first_request(event: h11.Event | type) -> h11.Request:
    if not isinstance(event, h11.Request):
        raise RelayError("the connection ended before a complete request arrived")
    return event


def _server_parser() -> h11.Connection:
    return h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)


async def read_head(sock: socket.socket) -> tuple[h11.Connection, h11.Request]:
    """The request head a sandbox sent to the proxy on a new (non-blocking) connection, and
    the parser holding whatever came after it."""
    loop = asyncio.get_running_loop()
    conn = _server_parser()
    while (event := _next_event(conn)) is h11.NEED_DATA:
        _receive(conn, await loop.sock_recv(sock, CHUNK))
    return conn, _first_request(event)


def read_event(conn: h11.Connection, stream: ByteStream, buffer: memoryview) -> h11.Event | type:
    """The next h11 event of `conn`, reading from `stream` (through `buffer`) as needed."""
    while (event := _next_event(conn)) is h11.NEED_DATA:
        _receive(conn, bytes(buffer[: stream.recv_into(buffer)]))
    return event


def read_request(stream: ByteStream) -> tuple[h11.Connection, h11.Request]:
    """The first request on a stream (inside an intercepted tunnel), and the parser."""
    conn = _server_parser()
    return conn, _first_request(read_event(conn, stream, memoryview(bytearray(CHUNK))))


def _encode(conn: h11.Connection, event: h11.Event) -> bytes:
    try:
        return conn.send(event) or b""
    except h11.LocalProtocolError as exc:
        raise RelayError(f"cannot forward: {exc}") from exc


def _send(conn: h11.Connection, stream: ByteStream, event: h11.Event) -> int:
    data = _encode(conn, event)
    if data:
        stream.sendall(data)
    return len(data)


def _sent_upstream(upstream: ByteStream, data: bytearray) -> bool:
    """Send what is pending of the request; False when the server no longer takes it (it may
    have answered early, e.g. refusing a body it will not read: that answer is relayed)."""
    try:
        upstream.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        return False
    data.clear()
    return True


def relay_exchange(
    client: ByteStream,
    client_conn: h11.Connection,
    request: h11.Request,
    upstream: ByteStream,
    *,
    target: bytes,
    host: bytes,
    inject: Sequence[tuple[bytes, bytes]],
    meter_up: Meter,
    meter_down: Meter,
    chunks: ChunkRate,
    scrub: Sequence[bytes] = (),
) -> int:
    """Send `request` (its body still in `client_conn`) upstream as `target` on `host`, and the
    answer back (with `scrub` secrets hidden in it); returns the response status. Heads and
    bodies are metered. Blocking: run in a worker thread (see streams.in_thread)."""
    buffer = memoryview(bytearray(CHUNK))
    up = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
    headers = request_headers(request.headers, host, inject)
    head = h11.Request(method=request.method, target=target, headers=headers)
    # The head and whatever of the body has arrived go out together: one write, and a server
    # that answers after the head alone still finds the whole request read.
    pending = bytearray(_encode(up, head))
    if not meter_up(len(pending)):
        raise RelayError("the call's byte budget is spent")
    if client_conn.they_are_waiting_for_100_continue:
        _send(client_conn, client, h11.InformationalResponse(status_code=100, headers=[]))
    while True:
        event = _next_event(client_conn)
        if event is h11.NEED_DATA:
            if not _sent_upstream(upstream, pending):
                break
            _receive(client_conn, bytes(buffer[: client.recv_into(buffer)]))
        elif isinstance(event, h11.Data):
            chunks.take("sandbox")
            if not meter_up(len(event.data)):
                raise RelayError("the call's byte budget is spent")
            pending += _encode(up, h11.Data(data=event.data))
        elif isinstance(event, h11.EndOfMessage):
            pending += _encode(up, h11.EndOfMessage())
            _sent_upstream(upstream, pending)
            break
        else:
            raise RelayError("the request body ended early")
    return _relay_answer(client, client_conn, upstream, up, buffer, meter_down, chunks, scrub)


def _relay_answer(
    client: ByteStream,
    client_conn: h11.Connection,
    upstream: ByteStream,
    up: h11.Connection,
    buffer: memoryview,
    meter_down: Meter,
    chunks: ChunkRate,
    scrub: Sequence[bytes],
) -> int:
    status = 0
    scrubber = Scrubber(scrub)
    while True:
        event = read_event(up, upstream, buffer)
        if isinstance(event, h11.InformationalResponse):
            continue  # 100 Continue was answered to the sandbox already
        if isinstance(event, h11.Response):
            status = event.status_code
            forms = secret_forms(scrub)
            if forms and _encoded(event.headers):
                raise RelayError(
                    "the server answered with a Content-Encoding although the proxy asked for "
                    "identity; an encoded answer could carry the credential back, so it is dropped"
                )
            answer = [
                (hide_secrets(name, forms), hide_secrets(value, forms))
                for name, value in _forwarded(event.headers, _FRAMING)
            ]
            framing = _framing(event.headers)
            answer += [*framing, (b"connection", b"close")]
            reason = hide_secrets(event.reason, forms)
            response = h11.Response(status_code=status, headers=answer, reason=reason)
            if not meter_down(_send(client_conn, client, response)):
                raise RelayError("the call's byte budget is spent")
            length = framing[0][1] if framing[:1] and framing[0][0] == b"content-length" else None
            if length is not None and up.their_state is h11.SEND_BODY:
                # The framing is known (and cut to it): the body is copied as it arrives,
                # without parsing; the connection closes after it, so h11 need not follow.
                _copy_body(up, upstream, client, int(length), scrubber, meter_down)
                return status
        elif isinstance(event, h11.Data):
            chunks.take("server")
            if not meter_down(len(event.data)):
                raise RelayError("the call's byte budget is spent")
            _send(client_conn, client, h11.Data(data=scrubber.feed(event.data)))
        elif isinstance(event, h11.EndOfMessage):
            if rest := scrubber.flush():
                _send(client_conn, client, h11.Data(data=rest))
            _send(client_conn, client, h11.EndOfMessage())
            return status
        else:
            raise RelayError("the server closed the connection before its answer was complete")


def _copy_body(
    parser: h11.Connection,
    source: ByteStream,
    sink: ByteStream,
    length: int,
    scrubber: Scrubber,
    meter: Meter,
) -> None:
    """A Content-Length body of `length` bytes: what the parser already holds, then the rest
    straight from `source` to `sink`, without parsing, scrubbed in the one buffer it is read
    into (the bytes a secret could straddle are held back at its front for the next read)."""
    held = memoryview(parser.trailing_data[0][:length])
    work = bytearray(CHUNK + scrubber.keep)
    view = memoryview(work)
    kept, left = 0, length
    while left > 0:
        room = view[kept : kept + min(CHUNK, left)]
        if held:
            count = min(len(held), len(room))
            room[:count] = held[:count]
            held = held[count:]
        else:
            count = source.recv_into(room)
            if not count:
                raise RelayError("the server closed the connection before its answer was complete")
        left -= count
        if not meter(count):
            raise RelayError("the call's byte budget is spent")
        end = kept + count
        scrubber.scrub(work, end)
        ready = end if left == 0 else max(end - scrubber.keep, 0)
        sink.sendall(view[:ready])
        kept = end - ready
        work[:kept] = work[ready:end]


def refusal_response(status: int, reason: str) -> bytes:
    """A complete HTTP/1.1 response telling the sandbox's client why it was refused."""
    body = (reason + "\n").encode("utf-8", "replace")
    phrase = {403: b"Forbidden by tooljail policy", 502: b"Bad Gateway", 400: b"Bad Request"}
    head = (
        b"HTTP/1.1 %d %s\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\n"
        b"connection: close\r\n\r\n" % (status, phrase.get(status, b"Refused"), len(body))
    )
    return head + body
