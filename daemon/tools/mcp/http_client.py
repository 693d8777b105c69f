"""The HTTP client of an upstream MCP server: no answer is read past a size limit.

The SDK reads a JSON answer whole before it parses it (and an SSE event up to a limit of its own),
so a server answering without end would have the daemon buffer it without end. Here every JSON
body stops at `MAX_MESSAGE_BYTES`: the call it answered fails with an error that says so, and the
connection stays (the SDK reports the failure to that request alone).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx2

MAX_MESSAGE_BYTES = 16 << 20
"""Largest message taken from an upstream server (JSON body or SSE event; the sandbox's stdio
servers have the same limit)."""


class _CappedStream(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, limit: int) -> None:
        self._inner = inner
        self._limit = limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self._inner:
            seen += len(chunk)
            if seen > self._limit:
                raise httpx2.StreamError(f"the server's answer is over {self._limit} bytes")
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class CappedTransport(httpx2.AsyncBaseTransport):
    """Passes requests to `inner`; JSON answers are cut off (as an error) past `limit` bytes."""

    def __init__(self, limit: int, inner: httpx2.AsyncBaseTransport | None = None) -> None:
        self._limit = limit
        self._inner = inner or httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        json_answer = (
            response.headers.get("content-type", "").lower().startswith("application/json")
        )
        if json_answer and isinstance(response.stream, httpx2.AsyncByteStream):
            response.stream = _CappedStream(response.stream, self._limit)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def capped_http_client(limit: int = MAX_MESSAGE_BYTES) -> httpx2.AsyncClient:
    """A client as the SDK makes one (a server may hold a stream open for minutes; each call
    has its own deadline on top), over `CappedTransport`."""
    return httpx2.AsyncClient(
        timeout=httpx2.Timeout(30.0, read=300.0), transport=CappedTransport(limit)
    )
