"""A Write's content crosses to the runner as raw UTF-8 after the request's header, never as JSON
escapes (attacker round 105: 15 MiB of control characters made the daemon hold 300 MB for one
Write), over a socket pair read by the runner's own `read_request`."""

from __future__ import annotations

import asyncio
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

from sandbox.backend import SandboxSpec, WriteFileRequest
from sandbox.docker_backend import DockerSandbox, _AttachConnection
from sandbox.protocol import STDOUT, encode_frame
from sandbox.runner import runner as runner_module
from tests.unit.test_sandbox_attach_progress import Backend, docker_frame, pair

__all__ = ["pair"]  # the socket pair fixture, shared


class Container:
    """Reads one request with the runner's reader (counting the bytes it took), then answers."""

    def __init__(self, end: socket.socket) -> None:
        self.end = end
        self.request: dict[str, Any] | None = None
        self.wire_bytes = 0
        self._thread = threading.Thread(target=self._serve)
        self._thread.start()

    def _serve(self) -> None:
        read, write = socket.socketpair()
        counted = threading.Thread(target=self._count_into, args=(write,))
        counted.start()
        self.request = runner_module.read_request(read.fileno(), 5)
        answer = encode_frame({"type": "result", "v": runner_module.PROTOCOL_VERSION})
        self.end.sendall(docker_frame(STDOUT, answer))
        self.end.shutdown(socket.SHUT_RD)
        counted.join()
        read.close()

    def _count_into(self, write: socket.socket) -> None:
        while data := self.end.recv(1 << 20):
            self.wire_bytes += len(data)
            write.sendall(data)
        write.close()

    def join(self) -> None:
        self._thread.join(10)


async def test_control_characters_cross_as_raw_bytes_not_json_escapes(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    host, far = pair
    content = "\x01" * (2 << 20)
    container = Container(far)
    sandbox = DockerSandbox(
        Backend(),
        "c0ffee",
        _AttachConnection(host),
        SandboxSpec(workspace=Path("/ws")),  # type: ignore[arg-type]
    )
    request = WriteFileRequest(path="/ws/f", content=content, expected_sha256=None)
    result = await sandbox.run(request)
    await asyncio.to_thread(container.join)
    assert result.exit_code == 0
    received = container.request
    assert received is not None
    assert received[runner_module.ATTACHED] == content.encode("utf-8")
    assert "content" not in received and received["path"] == "/ws/f"
    assert container.wire_bytes <= len(content) + 4096, "the content was escaped on the wire"


async def test_content_that_is_not_utf8_still_goes_as_json(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    """Lone surrogates cannot be UTF-8 encoded: the old frame carries them as escapes, and the
    runner refuses them as it always did."""
    host, far = pair
    container = Container(far)
    sandbox = DockerSandbox(
        Backend(),
        "c0ffee",
        _AttachConnection(host),
        SandboxSpec(workspace=Path("/ws")),  # type: ignore[arg-type]
    )
    await sandbox.run(WriteFileRequest(path="/ws/f", content="a\udc80b"))
    await asyncio.to_thread(container.join)
    received = container.request
    assert received is not None
    assert received["content"] == "a\udc80b" and runner_module.ATTACHED not in received


def test_the_runner_refuses_attached_bytes_out_of_range_or_cut_short() -> None:
    for header, tail, problem in (
        ({"kind": "write_file", "attached_bytes": -1}, b"", "out of range"),
        ({"kind": "write_file", "attached_bytes": "9"}, b"", "out of range"),
        (
            {"kind": "write_file", "attached_bytes": runner_module.MAX_REQUEST_BYTES},
            b"",
            "out of range",
        ),
        ({"kind": "write_file", "attached_bytes": 10}, b"short", "in the middle"),
    ):
        read, write = socket.socketpair()
        write.sendall(encode_frame(header) + tail)
        write.close()
        with pytest.raises(runner_module.RequestError, match=problem):
            runner_module.read_request(read.fileno(), 5)
        read.close()
