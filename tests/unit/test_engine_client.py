"""The engine client's Unix transport: a failed connect closes its socket at once."""

from __future__ import annotations

import gc
import socket
import warnings
from pathlib import Path

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
