"""The docker SDK client tooljail talks to the engine with.

The SDK's Unix socket connection opens a socket and connects it without closing it when the
connect fails: while the engine is stopped, every request left one socket for the garbage
collector (a ResourceWarning each); and it keeps a pool of connections per URL, so a request
naming a container (start, remove) connected anew. Here the Unix transport is the SDK's own with
those two things done otherwise; everything else is the SDK as it comes.
"""

from __future__ import annotations

import os
import re
import socket
from typing import Any
from urllib.parse import urlsplit

import docker
from docker.constants import MINIMUM_DOCKER_API_VERSION
from docker.transport import unixconn


class _UnixConnection(unixconn.UnixHTTPConnection):
    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self.unix_socket)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


class _UnixConnectionPool(unixconn.UnixHTTPConnectionPool):
    def _new_conn(self) -> Any:
        timeout: Any = self.timeout
        return _UnixConnection(self.base_url, self.socket_path, timeout)


#: Requests whose connection becomes a stream of their own (the engine upgrades it).
_TAKEN_OVER = re.compile(r"/(?:containers/[^/]+/attach(?:/ws)?|exec/[^/]+/start|session|grpc)$")
_SHARED_POOL = "http+docker://localhost"


class _UnixAdapter(unixconn.UnixHTTPAdapter):
    """One pool of connections for every request (the SDK keeps one per URL, and most URLs name
    one container: each create, start and remove opened a connection of its own), except those
    whose connection is taken over as a stream: each gets one that no pool hands out again."""

    def get_connection(self, url: str | bytes, proxies: Any = None) -> _UnixConnectionPool:
        text = url.decode() if isinstance(url, bytes) else url
        if _TAKEN_OVER.search(urlsplit(text).path):
            return self._new_pool(text)
        with self.pools.lock:
            pool: _UnixConnectionPool | None = self.pools.get(_SHARED_POOL)
            if pool is None:
                pool = self._new_pool(_SHARED_POOL)
                self.pools[_SHARED_POOL] = pool
        return pool

    def _new_pool(self, url: str) -> _UnixConnectionPool:
        return _UnixConnectionPool(url, self.socket_path, self.timeout, maxsize=self.max_pool_size)


def engine_listening() -> bool:
    """Whether the engine the environment names could answer: its Unix socket accepts a
    connection (a TCP engine is assumed to). Cheap, and leaves nothing open: a daemon waiting
    for its engine asks this every few seconds, where a failed client would leak a socket."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        return True
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(2.0)
        try:
            probe.connect(host.removeprefix("unix://"))
        except OSError:
            return False
    return True


def engine_client(max_pool_size: int | None = None) -> docker.DockerClient:
    """A client for the engine the environment names (DOCKER_HOST, by default the Unix socket),
    negotiating the API version; one blocking call.

    The client never reads proxies or credentials (.netrc) from the environment: the engine is
    named by DOCKER_HOST alone, a .netrc entry for its host would go to it on every request, and
    looking them up costs about a third of the client's CPU per request."""
    # A fixed version first (no request yet), so the negotiation below runs without them too.
    kwargs: dict[str, Any] = {"version": MINIMUM_DOCKER_API_VERSION}
    if max_pool_size is not None:
        kwargs["max_pool_size"] = max_pool_size
    client = docker.from_env(**kwargs)
    api: Any = client.api
    api.trust_env = False
    current = getattr(api, "_custom_adapter", None)
    if isinstance(current, unixconn.UnixHTTPAdapter):
        adapter = _UnixAdapter(
            f"http+unix://{current.socket_path}",
            timeout=current.timeout,
            max_pool_size=current.max_pool_size,
        )
        api.mount("http+docker://", adapter)
        api._custom_adapter = adapter
        current.close()
    try:
        api._version = api._retrieve_server_version()
    except BaseException:
        client.close()
        raise
    return client
