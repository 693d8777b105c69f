"""Clients of an OPA server: over HTTP(S) for an external one, over a Unix socket for the managed
one, with an optional bearer token either way.

opa-python-client opens one aiohttp session when its context is entered (`_init_session`) and
sends `{"input": document}` through that session's JSON encoder. tooljail opens that session
itself, for three reasons: the library speaks TCP only (the Unix socket is a connector); a
document is encoded before it is queried (daemon.policy.document_body, in a worker thread when it
is large), so the session's encoder only hands those bytes on instead of serialising megabytes on
the event loop; and plain HTTP goes through daemon.policy.opa_http, which costs a decision a
fraction of aiohttp's CPU (HTTPS keeps aiohttp's TLS). The factory is set on the instance: the
library has no type hints, and a subclass of an untyped class is what mypy --strict refuses.
"""

from __future__ import annotations

import json
import ssl
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from opa_client import AsyncOpaClient

from daemon.policy.document_body import EncodedDocument
from daemon.policy.opa_http import Connect, OpaHttpSession, tcp_connect, unix_connect

UNIX_SCHEME = "unix://"


def _body(value: Any) -> bytes | bytearray:
    """The session's JSON encoder: splices in a document encoded beforehand."""
    document = value.get("input") if isinstance(value, dict) else None
    if isinstance(document, EncodedDocument):
        return document.body
    return json.dumps(value).encode("utf-8")


def _session_factory(client: AsyncOpaClient, connector: Any, timeout_s: float | None) -> Any:
    async def open_session() -> None:
        client._connector = connector()
        client._session = aiohttp.ClientSession(
            headers=client.headers,
            connector=client._connector,
            timeout=aiohttp.ClientTimeout(total=timeout_s),
            json_serialize_bytes=lambda value: bytes(_body(value)),
        )

    return open_session


def _plain_session_factory(
    client: AsyncOpaClient, connect: Connect, host: str, timeout_s: float | None
) -> Any:
    async def open_session() -> None:
        client._session = OpaHttpSession(connect, host, client.headers or {}, _body, timeout_s)

    return open_session


def client_for(url: str, timeout_s: float | None, token: str | None = None) -> AsyncOpaClient:
    """An async OPA client with no retries for `unix:///path/to.sock` or `http(s)://host:port`,
    sending `token` as a bearer token when given; each request times out after `timeout_s`
    (None: the caller bounds each itself)."""
    if url.startswith(UNIX_SCHEME):
        path = Path(url.removeprefix(UNIX_SCHEME))
        if not path.is_absolute():
            raise ValueError(f"an OPA Unix socket must be an absolute path, got {url!r}")
        client = AsyncOpaClient(host="localhost", port=80, token=token, retries=0)
        client._init_session = _plain_session_factory(
            client, unix_connect(str(path)), "localhost", timeout_s
        )
        return client
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(
            f"OPA URL must be http(s)://host:port or unix:///path/to.sock, got {url!r}"
        )
    https = parts.scheme == "https"
    port = parts.port or (443 if https else 8181)
    client = AsyncOpaClient(host=parts.hostname, port=port, ssl=https, token=token, retries=0)
    if not https:
        client._init_session = _plain_session_factory(
            client, tcp_connect(parts.hostname, port), parts.netloc.rpartition("@")[2], timeout_s
        )
        return client
    # Certificates are checked against the system's CAs, as the library itself does.
    tls = ssl.create_default_context()
    client._init_session = _session_factory(
        client, lambda: aiohttp.TCPConnector(ssl=tls), timeout_s
    )
    return client
