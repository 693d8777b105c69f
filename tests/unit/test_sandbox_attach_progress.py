"""DockerSandbox's reading of the attach stream, over a socket pair instead of a container.

The far end plays the container: it writes Docker-multiplexed frames carrying the runner's
messages. What the host must do with them: hand progress chunks to the callback as they come,
return the result, and never let a failing callback cost the result.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox.backend import BashRequest, SandboxSpec
from sandbox.docker_backend import DockerSandbox, _AttachConnection
from sandbox.protocol import STDERR, STDOUT, encode_frame
from sandbox.set_up_gate import FreezeOutcome, SetUpGate

REQUEST = BashRequest(command="make", cwd="/w", timeout_ms=5_000)


class Backend:
    """The few things DockerSandbox asks of its backend."""

    grace_s = 2.0
    write_timeout_s = 5.0

    def __init__(self) -> None:
        self.removed: list[str] = []
        self.gate = SetUpGate(_NeverFrozen())
        self.stopped: set[str] = set()

    def stopped_for_set_up(self, container_id: str) -> bool:
        return container_id in self.stopped

    async def remove(self, container_id: str) -> None:
        self.removed.append(container_id)


class _NeverFrozen:
    """No pinned container is set up beside these: nothing is ever frozen."""

    async def freeze(self, container_id: str) -> FreezeOutcome:
        raise AssertionError(f"{container_id} frozen")

    async def thaw(self, container_id: str) -> None:
        raise AssertionError(f"{container_id} thawed")

    async def gone(self, container_id: str) -> bool:
        raise AssertionError(f"{container_id} looked for")

    async def stop(self, container_id: str) -> bool:
        raise AssertionError(f"{container_id} stopped")


def docker_frame(stream: int, payload: bytes) -> bytes:
    return struct.pack(">BxxxI", stream, len(payload)) + payload


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    host, container = socket.socketpair()
    yield host, container
    host.close()
    container.close()


def sandbox_over(host: socket.socket) -> tuple[DockerSandbox, Backend]:
    backend = Backend()
    spec = SandboxSpec(workspace=Path("/ws"), run_as=(1000, 1000))
    return DockerSandbox(backend, "c0ffee", _AttachConnection(host), spec), backend  # type: ignore[arg-type]


async def play_container(container: socket.socket, messages: list[dict[str, Any]]) -> None:
    """Read the request, then answer with `messages`, one frame at a time, a little apart."""
    loop = asyncio.get_running_loop()
    container.setblocking(False)
    request = await loop.sock_recv(container, 1 << 16)
    assert json.loads(request[4:])["command"] == "make"
    for message in messages:
        await loop.sock_sendall(container, docker_frame(STDOUT, encode_frame(message)))
        await asyncio.sleep(0.01)


async def test_progress_chunks_reach_the_callback_in_order_before_the_result(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    host, container = pair
    sandbox, _ = sandbox_over(host)
    seen: list[str] = []
    answer = [
        {"type": "progress", "output": "compiling\n"},
        {"type": "progress", "output": ""},  # empty: nothing to show
        {"type": "progress", "output": 42},  # malformed: ignored, not fatal
        {"type": "progress", "output": "linking\n"},
        {"type": "result", "exit_code": 0, "output": "compiling\nlinking\n", "final_cwd": "/w"},
    ]
    player = asyncio.create_task(play_container(container, answer))
    result = await sandbox.run(REQUEST, seen.append)
    await player
    assert seen == ["compiling\n", "linking\n"]
    assert result.output == "compiling\nlinking\n" and result.exit_code == 0


async def test_a_failing_callback_is_dropped_and_the_result_still_comes(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    host, container = pair
    sandbox, _ = sandbox_over(host)
    calls: list[str] = []

    def broken(chunk: str) -> None:
        calls.append(chunk)
        raise RuntimeError("listener went away")

    answer = [
        {"type": "progress", "output": "one\n"},
        {"type": "progress", "output": "two\n"},
        {"type": "result", "exit_code": 3, "output": "one\ntwo\n"},
    ]
    player = asyncio.create_task(play_container(container, answer))
    result = await sandbox.run(REQUEST, broken)
    await player
    assert calls == ["one\n"], "a callback that failed once is not called again"
    assert result.exit_code == 3 and result.output == "one\ntwo\n"


async def test_without_a_callback_progress_is_skipped(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    host, container = pair
    sandbox, _ = sandbox_over(host)
    answer = [
        {"type": "progress", "output": "x" * 8192},
        {"type": "result", "exit_code": 0, "output": "done\n"},
    ]
    player = asyncio.create_task(play_container(container, answer))
    result = await sandbox.run(REQUEST)
    await player
    assert result.output == "done\n"


async def test_stderr_between_progress_frames_does_not_disturb_them(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    host, container = pair
    sandbox, _ = sandbox_over(host)
    seen: list[str] = []
    loop = asyncio.get_running_loop()
    container.setblocking(False)
    run = asyncio.create_task(sandbox.run(REQUEST, seen.append))
    await loop.sock_recv(container, 1 << 16)
    progress = encode_frame({"type": "progress", "output": "half"})
    # A message split across two Docker frames, with the runner's stderr in between.
    await loop.sock_sendall(container, docker_frame(STDOUT, progress[:5]))
    await loop.sock_sendall(container, docker_frame(STDERR, b"warning: noise\n"))
    await loop.sock_sendall(container, docker_frame(STDOUT, progress[5:]))
    await asyncio.sleep(0.05)
    assert seen == ["half"], "progress must be handed over before the result exists"
    result = encode_frame({"type": "result", "exit_code": 0, "output": "half"})
    await loop.sock_sendall(container, docker_frame(STDOUT, result))
    assert (await run).output == "half"


async def test_a_command_stopped_for_another_containers_set_up_is_told_why(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    """Attacker round 123: a command stopped because its container could not be frozen while
    another container of its workspace was made said only "its runner ended without
    answering"."""
    host, container = pair
    sandbox, backend = sandbox_over(host)
    backend.stopped.add("c0ffee")

    async def stopped_meanwhile() -> None:
        await asyncio.get_running_loop().sock_recv(container, 1 << 16)
        container.close()

    container.setblocking(False)
    task = asyncio.create_task(stopped_meanwhile())
    result = await sandbox.run(REQUEST)
    await task
    assert result.exit_code == -1
    assert "could not be paused while another container of its workspace" in result.error
