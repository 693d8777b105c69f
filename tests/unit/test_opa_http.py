"""The plain-HTTP session to OPA: replies read whole by their length, chunked or to the close;
connections reused only when a reply ended where it said; a request that failed or was cancelled
never leaves its answer for a later one. A scripted server on a Unix socket plays OPA, replying
with exactly the bytes each test gives it."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from daemon.policy.opa_client import client_for
from daemon.policy.opa_http import (
    MAX_HEAD_BYTES,
    SEND_SLICE_BYTES,
    OpaHttpError,
    OpaHttpSession,
    unix_connect,
)

Script = Callable[[bytes], "bytes | None"]
"""From one request (head and body) to the raw bytes sent back; None closes the connection."""


def ok(body: bytes, extra: str = "") -> bytes:
    return f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


@dataclass
class ScriptedOpa:
    """Answers each request by `script`, after `delay_s`; counts connections and requests."""

    script: Script
    delay_s: float = 0.0
    close_after_reply: bool = False
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)
    writers: list[asyncio.StreamWriter] = field(default_factory=list)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                length = 0
                for line in head.decode().split("\r\n"):
                    if line.lower().startswith("content-length:"):
                        length = int(line.split(":", 1)[1])
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                if self.delay_s:
                    await asyncio.sleep(self.delay_s)
                reply = self.script(request)
                if reply is None:
                    break
                writer.write(reply)
                await writer.drain()
                if self.close_after_reply:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def scripted(tmp_path: Path) -> AsyncIterator[tuple[ScriptedOpa, str]]:
    opa = ScriptedOpa(lambda request: ok(b'{"result": true}'))
    path = tmp_path / "opa.sock"
    server = await asyncio.start_unix_server(opa.serve, str(path))
    try:
        yield opa, str(path)
    finally:
        server.close()
        for writer in opa.writers:
            writer.close()


def _session(path: str, timeout_s: float | None = 5.0) -> OpaHttpSession:
    return OpaHttpSession(
        unix_connect(path), "localhost", {}, lambda v: json.dumps(v).encode(), timeout_s
    )


async def _query(session: OpaHttpSession, value: object = None) -> object:
    reply = await session.request("POST", "http://localhost/v1/data/x", json={"input": value})
    reply.raise_for_status()
    return await reply.json()


async def test_a_kept_alive_connection_carries_the_next_query(
    scripted: tuple[ScriptedOpa, str],
) -> None:
    opa, path = scripted
    session = _session(path)
    try:
        assert await _query(session, 1) == {"result": True}
        assert await _query(session, 2) == {"result": True}
    finally:
        await session.close()
    assert opa.connections == 1
    first = opa.requests[0].decode()
    assert first.startswith("POST /v1/data/x HTTP/1.1\r\nHost: localhost\r\n")
    assert "Content-Type: application/json" in first and first.endswith('{"input": 1}')


async def test_a_chunked_reply_is_read_whole_and_the_connection_reused(
    scripted: tuple[ScriptedOpa, str],
) -> None:
    opa, path = scripted
    body = json.dumps({"result": ["a" * 5000, "b"]}).encode()
    chunks = b"".join(
        f"{len(part):x}; ext=1\r\n".encode() + part + b"\r\n" for part in (body[:4096], body[4096:])
    )
    opa.script = lambda request: (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\n\r\n"
    )
    session = _session(path)
    try:
        assert await _query(session) == {"result": ["a" * 5000, "b"]}
        assert await _query(session) == {"result": ["a" * 5000, "b"]}
    finally:
        await session.close()
    assert opa.connections == 1


async def test_a_reply_without_a_length_is_read_to_the_close_and_not_reused(
    scripted: tuple[ScriptedOpa, str],
) -> None:
    opa, path = scripted
    opa.script = lambda request: b'HTTP/1.1 200 OK\r\n\r\n{"result": 3}'
    opa.close_after_reply = True
    session = _session(path)
    try:
        assert await _query(session) == {"result": 3}
        assert await _query(session) == {"result": 3}
    finally:
        await session.close()
    assert opa.connections == 2


async def test_bytes_past_a_reply_are_never_read_as_the_next_answer(
    scripted: tuple[ScriptedOpa, str],
) -> None:
    opa, path = scripted
    replies = iter([ok(b'{"result": 1}') + ok(b'{"result": "stale"}'), ok(b'{"result": 2}')])
    opa.script = lambda request: next(replies)
    session = _session(path)
    try:
        assert await _query(session) == {"result": 1}
        assert await _query(session) == {"result": 2}
    finally:
        await session.close()
    assert opa.connections == 2


async def test_a_query_given_up_on_leaves_no_answer_for_the_next(
    scripted: tuple[ScriptedOpa, str],
) -> None:
    """The answer to a query that timed out arrives late; the next query must get its own."""
    opa, path = scripted
    opa.script = lambda request: ok(request.rsplit(b"\r\n\r\n", 1)[1])
    opa.delay_s = 0.3
    session = _session(path, timeout_s=0.1)
    try:
        with pytest.raises(TimeoutError):
            await _query(session, "first")
        await asyncio.sleep(0.4)  # its answer has been sent by now
        opa.delay_s = 0.0
        assert await _query(session, "second") == {"input": "second"}
    finally:
        await session.close()
    assert opa.connections == 2


async def test_a_connection_opa_closed_while_idle_is_replaced_without_an_error(
    scripted: tuple[ScriptedOpa, str],
) -> None:
    opa, path = scripted
    session = _session(path)
    try:
        assert await _query(session) == {"result": True}
        for writer in opa.writers:
            writer.close()
        await asyncio.sleep(0.05)
        assert await _query(session) == {"result": True}
    finally:
        await session.close()
    assert opa.connections == 2


async def test_a_connection_opa_drops_after_taking_the_query_is_an_error(
    scripted: tuple[ScriptedOpa, str],
) -> None:
    opa, path = scripted
    answers = iter([ok(b'{"result": 1}'), None])
    opa.script = lambda request: next(answers)
    session = _session(path)
    try:
        assert await _query(session) == {"result": 1}
        # Reused, and dropped before any byte of a reply: sent once more on a new connection,
        # whose server this time drops it too, and that is an error.
        opa.script = lambda request: None
        with pytest.raises(ConnectionError):
            await _query(session)
    finally:
        await session.close()


async def test_connection_close_is_honoured(scripted: tuple[ScriptedOpa, str]) -> None:
    opa, path = scripted
    opa.script = lambda request: ok(b'{"result": 1}', "Connection: close\r\n")
    session = _session(path)
    try:
        assert await _query(session) == {"result": 1}
        assert await _query(session) == {"result": 1}
    finally:
        await session.close()
    assert opa.connections == 2


@pytest.mark.parametrize(
    "reply",
    [
        b"SSH-2.0-OpenSSH\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabcd\r\n",
        b"HTTP/1.1 200 OK\r\nX: " + b"y" * (MAX_HEAD_BYTES + 10),
    ],
    ids=["not-http", "negative-length", "huge-length", "bad-chunk", "chunk-overrun", "huge-head"],
)
async def test_a_malformed_reply_is_an_error(
    scripted: tuple[ScriptedOpa, str], reply: bytes
) -> None:
    opa, path = scripted
    opa.script = lambda request: reply
    session = _session(path)
    try:
        with pytest.raises(OpaHttpError):
            await _query(session)
    finally:
        await session.close()


async def test_an_http_error_names_the_status_and_what_opa_said(
    scripted: tuple[ScriptedOpa, str],
) -> None:
    opa, path = scripted
    body = b'{"code": "invalid_parameter"}'
    opa.script = lambda request: ok(body).replace(b"200 OK", b"400 Bad Request")
    session = _session(path)
    try:
        with pytest.raises(OpaHttpError, match=re.escape(f"HTTP 400: {body.decode()}")):
            await _query(session)
    finally:
        await session.close()


async def test_a_redirect_to_a_path_of_the_same_server_is_followed_for_a_get(
    scripted: tuple[ScriptedOpa, str],
) -> None:
    opa, path = scripted

    def moved(request: bytes) -> bytes:
        if request.startswith(b"GET /v1/policies/ "):
            return b"HTTP/1.1 301 Moved\r\nLocation: /v1/policies\r\nContent-Length: 0\r\n\r\n"
        if request.startswith(b"GET /v1/elsewhere "):
            return b"HTTP/1.1 301 Moved\r\nLocation: http://other/\r\nContent-Length: 0\r\n\r\n"
        return ok(b'{"result": []}')

    opa.script = moved
    session = _session(path)
    try:
        reply = await session.request("GET", "http://localhost/v1/policies/")
        assert (reply.status, await reply.json()) == (200, {"result": []})
        elsewhere = await session.request("GET", "http://localhost/v1/elsewhere")
        assert elsewhere.status == 301
    finally:
        await session.close()
    assert [r.split(b" ")[1] for r in opa.requests] == [
        b"/v1/policies/",
        b"/v1/policies",
        b"/v1/elsewhere",
    ]


async def test_the_library_client_sends_its_bearer_token_through_the_session(
    scripted: tuple[ScriptedOpa, str],
) -> None:
    opa, path = scripted
    client = client_for(f"unix://{path}", 5.0, token="t0ken")
    async with client:
        assert await client.query_rule({"a": 1}, "tooljail.authz", "decision") == {"result": True}
        assert await client.check_health()
    assert b"Authorization: Bearer t0ken\r\n" in opa.requests[0]
    assert opa.requests[0].startswith(b"POST /v1/data/tooljail/authz/decision HTTP/1.1\r\n")
    assert opa.requests[1].startswith(b"GET /health HTTP/1.1\r\n")


async def test_closing_the_session_ends_a_query_in_flight(
    scripted: tuple[ScriptedOpa, str],
) -> None:
    opa, path = scripted
    opa.delay_s = 5.0
    session = _session(path)
    query = asyncio.ensure_future(_query(session))
    while not opa.requests:
        await asyncio.sleep(0.01)
    await session.close()
    with pytest.raises(ConnectionError):
        await query
    with pytest.raises(OpaHttpError, match="closed"):
        await _query(session)


async def test_bytes_sent_on_an_idle_connection_are_never_read_as_an_answer(
    scripted: tuple[ScriptedOpa, str],
) -> None:
    """Attacker round 102's lead: bytes arriving on a pooled connection between two requests
    (an OPA behind a proxy, a 1xx sent late) would have been read as the next query's answer."""
    opa, path = scripted
    opa.script = lambda request: ok(request.rsplit(b"\r\n\r\n", 1)[1])
    session = _session(path)
    try:
        assert await _query(session, "first") == {"input": "first"}
        opa.writers[0].write(ok(b'{"input": "unsolicited"}'))
        await asyncio.sleep(0.1)
        assert await _query(session, "second") == {"input": "second"}
    finally:
        await session.close()
    assert opa.connections == 2


async def test_a_large_body_is_not_copied_whole_into_the_transport(tmp_path: Path) -> None:
    """Attacker round 107: the transport copied what the socket did not take at once, a second
    copy of a large input's tens of megabytes; it now gets a slice at a time."""
    body = bytearray(b"x" * (16 << 20))

    async def slow_reader(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(re.search(rb"Content-Length: (\d+)", head).group(1))  # type: ignore[union-attr]
        while length:
            length -= len(await reader.read(min(length, 1 << 16)))
            await asyncio.sleep(0)
        writer.write(ok(b'{"result": true}'))
        await writer.drain()
        writer.close()

    path = str(tmp_path / "slow.sock")
    server = await asyncio.start_unix_server(slow_reader, path, limit=1 << 16)
    session = OpaHttpSession(unix_connect(path), "localhost", {}, lambda _: body, 30.0)
    buffered = 0

    async def watch() -> None:
        nonlocal buffered
        while True:
            for connection in session._busy:
                if connection.transport is not None:
                    buffered = max(buffered, connection.transport.get_write_buffer_size())
            await asyncio.sleep(0)

    watcher = asyncio.create_task(watch())
    try:
        assert await _query(session) == {"result": True}
    finally:
        watcher.cancel()
        await session.close()
        server.close()
    assert 0 < buffered <= SEND_SLICE_BYTES + (1 << 16), f"{buffered} bytes held by the transport"
