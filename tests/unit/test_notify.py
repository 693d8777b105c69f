"""The systemd notify protocol against a real AF_UNIX datagram socket (path and abstract)."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon.ops.notify import Notifier, run_watchdog, start_watchdog, watchdog_interval


def _bound(address: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(address)
    sock.setblocking(False)
    return sock


@pytest.fixture
def manager(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[socket.socket, str]]:
    """A socket standing in for systemd's, and its NOTIFY_SOCKET value (a short path)."""
    path = tmp_path_factory.mktemp("sd") / "notify.sock"
    sock = _bound(str(path))
    try:
        yield sock, str(path)
    finally:
        sock.close()


async def _recv(sock: socket.socket, timeout_s: float = 2.0) -> str:
    data = await asyncio.wait_for(asyncio.get_running_loop().sock_recv(sock, 4096), timeout_s)
    return data.decode()


async def _drain(sock: socket.socket) -> list[str]:
    received = []
    while True:
        try:
            received.append(sock.recv(4096).decode())
        except BlockingIOError:
            return received


async def test_ready_reaches_the_socket_and_variables_are_unset(
    manager: tuple[socket.socket, str],
) -> None:
    sock, path = manager
    env = {"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "30000000", "PATH": "/usr/bin"}
    notifier = Notifier.from_environment(env)

    assert notifier.enabled
    assert notifier.ready("listening on unix:///run/tooljail/tooljail.sock")
    assert await _recv(sock) == "READY=1\nSTATUS=listening on unix:///run/tooljail/tooljail.sock"
    # Children (OPA, docker) must not inherit the socket or the watchdog.
    assert env == {"PATH": "/usr/bin"}
    assert notifier.watchdog_s == 15.0


async def test_abstract_socket() -> None:
    name = f"tooljail-test-{uuid.uuid4().hex}"
    sock = _bound("\0" + name)
    try:
        notifier = Notifier(f"@{name}")
        assert notifier.ready()
        assert await _recv(sock) == "READY=1"
    finally:
        sock.close()


async def test_every_message_kind(manager: tuple[socket.socket, str]) -> None:
    sock, path = manager
    notifier = Notifier(path)

    assert notifier.status("draining 3 calls\nsecond line")
    assert await _recv(sock) == "STATUS=draining 3 calls second line"
    assert notifier.watchdog()
    assert await _recv(sock) == "WATCHDOG=1"
    assert notifier.stopping("stopping")
    assert await _recv(sock) == "STOPPING=1\nSTATUS=stopping"
    assert notifier.extend_timeout(12.5)
    assert await _recv(sock) == "EXTEND_TIMEOUT_USEC=12500000"

    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1_000
    assert notifier.reloading("reloading policies")
    after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1_000
    first, second, third = (await _recv(sock)).split("\n")
    assert first == "RELOADING=1"
    assert second.startswith("MONOTONIC_USEC=")
    assert before <= int(second.removeprefix("MONOTONIC_USEC=")) <= after
    assert third == "STATUS=reloading policies"


async def test_without_notify_socket_everything_is_a_no_op() -> None:
    env = {"WATCHDOG_USEC": "30000000"}
    notifier = Notifier.from_environment(env)

    assert not notifier.enabled
    assert notifier.watchdog_s is None
    assert not notifier.ready()
    assert not notifier.watchdog()
    assert not notifier.reloading()
    assert start_watchdog(notifier, lambda: True) is None


async def test_a_vanished_socket_is_logged_not_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    notifier = Notifier(str(tmp_path / "gone.sock"))
    with caplog.at_level(logging.WARNING, logger="daemon.ops.notify"):
        assert not notifier.ready()
    assert "could not notify systemd" in caplog.text
    assert "READY=1" in caplog.text


def test_watchdog_interval_is_half_of_watchdog_usec_for_this_process() -> None:
    own = str(os.getpid())
    assert watchdog_interval({"WATCHDOG_USEC": "30000000"}) == 15.0
    assert watchdog_interval({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": own}) == 15.0
    assert watchdog_interval({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"}) is None
    assert watchdog_interval({"WATCHDOG_USEC": "0"}) is None
    assert watchdog_interval({"WATCHDOG_USEC": "soon"}) is None
    assert watchdog_interval({}) is None


async def test_watchdog_pings_only_while_healthy(manager: tuple[socket.socket, str]) -> None:
    sock, path = manager
    health = {"ok": True}
    notifier = Notifier(path, watchdog_s=0.02)
    task = start_watchdog(notifier, lambda: health["ok"])
    assert task is not None
    try:
        assert [await _recv(sock) for _ in range(3)] == ["WATCHDOG=1"] * 3

        health["ok"] = False
        await asyncio.sleep(0.05)  # a ping may have been on its way when the flag flipped
        await _drain(sock)
        await asyncio.sleep(0.2)
        assert await _drain(sock) == []

        health["ok"] = True
        assert await _recv(sock) == "WATCHDOG=1"
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_watchdog_check_that_fails_or_hangs_means_no_ping(
    manager: tuple[socket.socket, str],
) -> None:
    sock, path = manager
    calls = 0

    async def flaky() -> bool:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("OPA process is gone")
        if calls == 2:
            await asyncio.sleep(3600)  # cut short by the watchdog's own timeout
        return True

    task = asyncio.create_task(run_watchdog(Notifier(path), flaky, 0.05))
    try:
        assert await _recv(sock) == "WATCHDOG=1"
        # The first ping came from the first healthy answer, not the failure or the hang.
        assert calls >= 3
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
