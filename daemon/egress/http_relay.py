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
from collections.abc import Callable, Sequence
from urllib.parse import quote, quote_plus

import h11

CHUNK = 1 << 18
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
        self._secrets = secret_forms(secrets)
        self._keep = max((len(secret) for secret in self._secrets), default=1) - 1
        self._carry = b""

    def feed(self, data: bytes) -> bytes:
        """`data` scrubbed; the last bytes are held back until the next call (a secret may
        straddle two chunks)."""
        if not self._secrets:
            return data
        buffer = hide_secrets(self._carry + data, self._secrets)
        if not self._keep:
            self._carry = b""
            return buffer
        self._carry = buffer[-self._keep :]
        return buffer[: -self._keep]

    def flush(self) -> bytes:
        """What was held back (at the end of the stream)."""
        rest, self._carry = self._carry, b""
        return rest


async def read_event(conn: h11.Connection, reader: asyncio.StreamReader) -> h11.Event | type:
    """The next h11 event of `conn`, reading from `reader` as needed."""
    while True:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError as exc:
            raise RelayError(f"malformed HTTP: {exc}") from exc
        if event is not h11.NEED_DATA:
            return event
        data = await reader.read(CHUNK)
        try:
            conn.receive_data(data)
        except h11.RemoteProtocolError as exc:
            raise RelayError(f"malformed HTTP: {exc}") from exc


async def read_request(
    reader: asyncio.StreamReader,
) -> tuple[h11.Connection, h11.Request]:
    """The first request a sandbox sent on a new connection, and the parser holding the rest."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
    event = await read_event(conn, reader)
    if not isinstance(event, h11.Request):
        raise RelayError("the connection ended before a complete request arrived")
    return conn, event


def _send(conn: h11.Connection, writer: asyncio.StreamWriter, event: h11.Event) -> int:
    try:
        data = conn.send(event)
    except h11.LocalProtocolError as exc:
        raise RelayError(f"cannot forward: {exc}") from exc
    if data:
        writer.write(data)
    return len(data or b"")


async def relay_exchange(
    client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    client_conn: h11.Connection,
    request: h11.Request,
    upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    *,
    target: bytes,
    host: bytes,
    inject: Sequence[tuple[bytes, bytes]],
    meter_up: Meter,
    meter_down: Meter,
    scrub: Sequence[bytes] = (),
) -> int:
    """Send `request` (its body still in `client_conn`) upstream as `target` on `host`, and the
    answer back (with `scrub` secrets hidden in it); returns the response status. Heads and
    bodies are metered."""
    client_r, client_w = client
    upstream_r, upstream_w = upstream
    up = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
    headers = request_headers(request.headers, host, inject)
    head = h11.Request(method=request.method, target=target, headers=headers)
    if not meter_up(_send(up, upstream_w, head)):
        raise RelayError("the call's byte budget is spent")
    if client_conn.they_are_waiting_for_100_continue:
        _send(client_conn, client_w, h11.InformationalResponse(status_code=100, headers=[]))
    while True:
        event = await read_event(client_conn, client_r)
        if isinstance(event, h11.Data):
            if not meter_up(len(event.data)):
                raise RelayError("the call's byte budget is spent")
            _send(up, upstream_w, h11.Data(data=event.data))
            await upstream_w.drain()
        elif isinstance(event, h11.EndOfMessage):
            _send(up, upstream_w, h11.EndOfMessage())
            await upstream_w.drain()
            break
        else:
            raise RelayError("the request body ended early")
    status = 0
    scrubber = Scrubber(scrub)
    body_left: int | None = None
    """Bytes of a Content-Length body still to come, once h11 has read the head: they are
    then copied as they arrive, without parsing (the framing is known, and cut to it)."""
    while True:
        try:
            event = up.next_event()
        except h11.RemoteProtocolError as exc:
            raise RelayError(f"malformed HTTP: {exc}") from exc
        if event is h11.NEED_DATA:
            if body_left is not None:
                await _copy_body(
                    upstream_r, (client_conn, client_w), body_left, scrubber, meter_down
                )
                event = h11.EndOfMessage()
            else:
                data = await upstream_r.read(CHUNK)
                try:
                    up.receive_data(data)
                except h11.RemoteProtocolError as exc:
                    raise RelayError(f"malformed HTTP: {exc}") from exc
                continue
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
            if not meter_down(_send(client_conn, client_w, response)):
                raise RelayError("the call's byte budget is spent")
            if (
                framing[:1]
                and framing[0][0] == b"content-length"
                and up.their_state is h11.SEND_BODY
            ):
                body_left = int(framing[0][1])
        elif isinstance(event, h11.Data):
            if not meter_down(len(event.data)):
                raise RelayError("the call's byte budget is spent")
            if body_left is not None:
                body_left -= len(event.data)
            _send(client_conn, client_w, h11.Data(data=scrubber.feed(event.data)))
            await client_w.drain()
        elif isinstance(event, h11.EndOfMessage):
            if rest := scrubber.flush():
                _send(client_conn, client_w, h11.Data(data=rest))
            _send(client_conn, client_w, h11.EndOfMessage())
            await client_w.drain()
            return status
        else:
            raise RelayError("the server closed the connection before its answer was complete")


async def _copy_body(
    source: asyncio.StreamReader,
    client: tuple[h11.Connection, asyncio.StreamWriter],
    left: int,
    scrubber: Scrubber,
    meter: Meter,
) -> None:
    """The rest of a Content-Length body, `left` bytes, from `source` to the sandbox."""
    conn, writer = client
    while left > 0:
        data = await source.read(min(CHUNK, left))
        if not data:
            raise RelayError("the server closed the connection before its answer was complete")
        left -= len(data)
        if not meter(len(data)):
            raise RelayError("the call's byte budget is spent")
        _send(conn, writer, h11.Data(data=scrubber.feed(data)))
        await writer.drain()


def refusal_response(status: int, reason: str) -> bytes:
    """A complete HTTP/1.1 response telling the sandbox's client why it was refused."""
    body = (reason + "\n").encode("utf-8", "replace")
    phrase = {403: b"Forbidden by tooljail policy", 502: b"Bad Gateway", 400: b"Bad Request"}
    head = (
        b"HTTP/1.1 %d %s\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\n"
        b"connection: close\r\n\r\n" % (status, phrase.get(status, b"Refused"), len(body))
    )
    return head + body
