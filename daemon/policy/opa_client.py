"""Clients of an OPA server: over HTTP(S) for an external one, over a Unix socket for the managed
one, with an optional bearer token either way.

opa-python-client speaks TCP only; its async client opens one aiohttp session when its context is
entered (`_init_session`), and the only difference a Unix socket makes is the connector. So the
Unix-socket client is that client with a session factory using aiohttp's UnixConnector (the host
name in its URLs is then a label). The factory is set on the instance: the library has no type
hints, and a subclass of an untyped class is what mypy --strict refuses.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
from opa_client import AsyncOpaClient

UNIX_SCHEME = "unix://"


def _unix_socket_client(path: Path, token: str | None, timeout_s: float) -> AsyncOpaClient:
    client = AsyncOpaClient(host="localhost", port=80, token=token, retries=0, timeout=timeout_s)

    async def open_session() -> None:
        client._connector = aiohttp.UnixConnector(path=str(path))
        client._session = aiohttp.ClientSession(
            headers=client.headers,
            connector=client._connector,
            timeout=aiohttp.ClientTimeout(total=timeout_s),
        )

    client._init_session = open_session
    return client


def client_for(url: str, timeout_s: float, token: str | None = None) -> AsyncOpaClient:
    """An async OPA client with no retries for `unix:///path/to.sock` or `http(s)://host:port`,
    sending `token` as a bearer token when given."""
    if url.startswith(UNIX_SCHEME):
        path = Path(url.removeprefix(UNIX_SCHEME))
        if not path.is_absolute():
            raise ValueError(f"an OPA Unix socket must be an absolute path, got {url!r}")
        return _unix_socket_client(path, token, timeout_s)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(
            f"OPA URL must be http(s)://host:port or unix:///path/to.sock, got {url!r}"
        )
    port = parts.port or (443 if parts.scheme == "https" else 8181)
    return AsyncOpaClient(
        host=parts.hostname,
        port=port,
        ssl=parts.scheme == "https",
        token=token,
        retries=0,
        timeout=timeout_s,
    )
