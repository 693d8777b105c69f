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


def request_headers(
    headers: Sequence[tuple[bytes, bytes]], host: bytes, inject: Sequence[tuple[bytes, bytes]]
) -> Headers:
    """The headers sent upstream: the decided Host, the sandbox's end-to-end headers (any it sent
    under an injected name dropped) and the injected ones."""
    drop = frozenset({b"host", *(name.lower() for name, _ in inject)})
    return [(b"host", host), *_forwarded(headers, drop), *inject, (b"connection", b"close")]


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


def _send(conn: h11.Connection, writer: asyncio.StreamWriter, event: h11.Event) -> None:
    try:
        data = conn.send(event)
    except h11.LocalProtocolError as exc:
        raise RelayError(f"cannot forward: {exc}") from exc
    if data:
        writer.write(data)


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
) -> int:
    """Send `request` (its body still in `client_conn`) upstream as `target` on `host`, and the
    answer back; returns the response status."""
    client_r, client_w = client
    upstream_r, upstream_w = upstream
    up = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
    headers = request_headers(request.headers, host, inject)
    _send(up, upstream_w, h11.Request(method=request.method, target=target, headers=headers))
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
    while True:
        event = await read_event(up, upstream_r)
        if isinstance(event, h11.InformationalResponse):
            continue  # 100 Continue was answered to the sandbox already
        if isinstance(event, h11.Response):
            status = event.status_code
            answer = [*_forwarded(event.headers, frozenset()), (b"connection", b"close")]
            _send(
                client_conn,
                client_w,
                h11.Response(status_code=status, headers=answer, reason=event.reason),
            )
        elif isinstance(event, h11.Data):
            if not meter_down(len(event.data)):
                raise RelayError("the call's byte budget is spent")
            _send(client_conn, client_w, h11.Data(data=event.data))
            await client_w.drain()
        elif isinstance(event, h11.EndOfMessage):
            _send(client_conn, client_w, h11.EndOfMessage())
            await client_w.drain()
            return status
        else:
            raise RelayError("the server closed the connection before its answer was complete")


def refusal_response(status: int, reason: str) -> bytes:
    """A complete HTTP/1.1 response telling the sandbox's client why it was refused."""
    body = (reason + "\n").encode("utf-8", "replace")
    phrase = {403: b"Forbidden by tooljail policy", 502: b"Bad Gateway", 400: b"Bad Request"}
    head = (
        b"HTTP/1.1 %d %s\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\n"
        b"connection: close\r\n\r\n" % (status, phrase.get(status, b"Refused"), len(body))
    )
    return head + body
