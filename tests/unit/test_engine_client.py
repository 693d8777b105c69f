"""The engine client's Unix transport: a failed connect closes its socket at once, and requests
share their connections whatever container they name."""

from __future__ import annotations

import gc
import http.server
import json
import socket
import socketserver
import threading
import warnings
from pathlib import Path

import docker.errors
import pytest

from sandbox import engine_client


def test_a_refused_connect_leaves_no_socket_behind(tmp_path: Path) -> None:
    # A socket file nobody listens on: what the engine's socket is while dockerd is stopped.
    dead = tmp_path / "docker.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(dead))
    listener.close()
    connection = engine_client._UnixConnection("http+docker://localhost", str(dead), 5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(20):
            with pytest.raises(ConnectionRefusedError):
                connection.connect()
        gc.collect()
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []
    assert connection.sock is None


def test_a_missing_socket_file_is_the_same(tmp_path: Path) -> None:
    connection = engine_client._UnixConnection("http+docker://localhost", str(tmp_path / "x"), 5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(FileNotFoundError):
            connection.connect()
        gc.collect()
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []


def test_a_listening_socket_connects(tmp_path: Path) -> None:
    path = tmp_path / "engine.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
        listener.listen(1)
        connection = engine_client._UnixConnection("http+docker://localhost", str(path), 5)
        connection.connect()
        accepted, _ = listener.accept()
        connection.sock.sendall(b"ping")
        assert accepted.recv(4) == b"ping"
        accepted.close()
        connection.close()


class _EngineRecorder(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def _fake_engine(
    path: Path, seen: list[dict[str, str]], connections: list[int] | None = None
) -> _EngineRecorder:
    """An engine keeping its connections open (HTTP/1.1) that remembers the headers of every
    request and counts its connections: /version answers (for the client's API negotiation),
    every container is unknown."""

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            if connections is not None:
                connections.append(1)

        def _answer(self, status: int, payload: object) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            seen.append(dict(self.headers))
            if self.path.endswith("/version"):
                self._answer(200, {"ApiVersion": "1.43", "Version": "24.0.0"})
            else:
                self._answer(404, {"message": "No such container"})

        do_POST = do_DELETE = do_GET

        def address_string(self) -> str:
            return "engine"

        def log_message(self, *args: object) -> None:
            pass

    server = _EngineRecorder(str(path), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_the_engine_is_asked_without_credentials_or_proxies_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A .netrc entry for localhost would otherwise go to the engine as a Basic authorization
    # header on every request, and reading the environment for them costs a third of the
    # client's CPU per request.
    netrc = tmp_path / ".netrc"
    netrc.write_text("machine localhost login someone password hunter2\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("ALL_PROXY", "http://127.0.0.1:9")
    socket_path = tmp_path / "engine.sock"
    seen: list[dict[str, str]] = []
    server = _fake_engine(socket_path, seen)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{socket_path}")
    try:
        client = engine_client.engine_client()
        client.api.version(api_version=False)
        client.close()
    finally:
        server.shutdown()
        server.server_close()
    assert len(seen) >= 2
    assert not [headers for headers in seen if "Authorization" in headers]


def test_requests_naming_different_containers_share_one_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    socket_path = tmp_path / "engine.sock"
    connections: list[int] = []
    server = _fake_engine(socket_path, [], connections)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{socket_path}")
    try:
        client = engine_client.engine_client(max_pool_size=2)
        try:
            for n in range(30):
                for ask in (client.api.inspect_container, client.api.start, client.api.stop):
                    with pytest.raises(docker.errors.NotFound):
                        ask(f"{n:064x}")
        finally:
            client.close()
    finally:
        server.shutdown()
        server.server_close()
    # The SDK's own transport connected once a container: 30 or more.
    assert len(connections) == 1


@pytest.mark.parametrize(
    ("path", "taken_over"),
    [
        ("/v1.43/containers/abc/attach?stream=1", True),
        ("/v1.43/containers/abc/attach/ws", True),
        ("/v1.43/exec/abc/start", True),
        ("/v1.43/session", True),
        ("/v1.43/containers/abc/start", False),
        ("/v1.43/containers/create", False),
        ("/v1.43/containers/attach/json", False),
        ("/v1.43/containers/abc/json", False),
    ],
)
def test_a_connection_taken_over_as_a_stream_is_never_handed_out_again(
    path: str, taken_over: bool
) -> None:
    adapter = engine_client._UnixAdapter("http+unix:///nowhere.sock")
    first = adapter.get_connection(f"http+docker://localhost{path}")
    second = adapter.get_connection(f"http+docker://localhost{path}")
    shared = adapter.get_connection("http+docker://localhost/v1.43/info")
    assert (first is second) is not taken_over
    assert (first is shared) is not taken_over
    adapter.close()
