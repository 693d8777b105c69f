"""The upstream MCP client's transport stops reading a JSON answer at the limit; other answers
(SSE streams, capped per event by the SDK) pass through whole."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx2
import pytest

from daemon.tools.mcp.http_client import CappedTransport


def _answering(content_type: str, size: int) -> httpx2.MockTransport:
    """A server streaming `size` bytes in pieces (as a real answer arrives)."""

    async def pieces() -> AsyncIterator[bytes]:
        for start in range(0, size, 300):
            yield b"x" * min(300, size - start)

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": content_type}, content=pieces())

    return httpx2.MockTransport(handler)


async def _read(transport: httpx2.AsyncBaseTransport) -> bytes:
    async with httpx2.AsyncClient(transport=transport) as client:
        response = await client.get("http://upstream.test/mcp")
        return response.content


async def test_a_json_answer_within_the_limit_is_read_whole() -> None:
    body = await _read(CappedTransport(1000, _answering("application/json", 1000)))
    assert len(body) == 1000


async def test_a_json_answer_past_the_limit_fails() -> None:
    with pytest.raises(httpx2.StreamError, match="over 1000 bytes"):
        await _read(CappedTransport(1000, _answering("Application/JSON; charset=utf-8", 1001)))


async def test_an_event_stream_is_not_cut() -> None:
    body = await _read(CappedTransport(1000, _answering("text/event-stream", 5000)))
    assert len(body) == 5000
