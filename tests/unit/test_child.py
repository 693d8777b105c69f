"""Child: a process read and awaited on the event loop, without helper threads."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import pytest

from daemon.host.child import Child


async def _all(child: Child, which: str) -> bytes:
    pipe = child.stdout if which == "stdout" else child.stderr
    data = b""
    while chunk := await child.read(pipe):
        data += chunk
    return data


async def test_output_exit_code_and_no_helper_thread() -> None:
    threads = threading.active_count()
    child = Child(["sh", "-c", "printf out; printf err >&2; exit 3"], cwd="/", pass_fds=())
    try:
        out, err = await asyncio.gather(_all(child, "stdout"), _all(child, "stderr"))
        assert threading.active_count() == threads
        assert await child.wait() == 3
    finally:
        await child.close()
    assert (out, err) == (b"out", b"err")
    assert child.returncode == 3


async def test_large_output_arrives_whole() -> None:
    child = Child(["head", "-c", "3000000", "/dev/zero"], cwd="/", pass_fds=())
    try:
        data = await _all(child, "stdout")
        assert await child.wait() == 0
    finally:
        await child.close()
    assert len(data) == 3_000_000


async def test_close_kills_a_running_process_at_once() -> None:
    child = Child(["sleep", "30"], cwd="/", pass_fds=())
    started = time.monotonic()
    await child.close()
    assert time.monotonic() - started < 5
    assert child.returncode is not None and child.returncode < 0


async def test_a_cancelled_reader_leaves_nothing_registered() -> None:
    child = Child(["sleep", "30"], cwd="/", pass_fds=())
    reader = asyncio.create_task(_all(child, "stdout"))
    await asyncio.sleep(0.1)
    reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader
    await child.close()
    assert child.stdout is not None and child.stdout.closed


async def test_the_working_directory_and_passed_descriptor() -> None:
    fd = os.open("/tmp", os.O_RDONLY | os.O_DIRECTORY)
    try:
        child = Child(["pwd", "-P"], cwd=f"/proc/self/fd/{fd}", pass_fds=(fd,))
        try:
            assert (await _all(child, "stdout")).strip() == os.path.realpath("/tmp").encode()
        finally:
            await child.close()
    finally:
        os.close(fd)


async def test_without_pidfds_the_exit_is_awaited_in_a_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def unsupported(pid: int) -> int:
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(os, "pidfd_open", unsupported)
    child = Child(["sh", "-c", "printf done; exit 4"], cwd="/", pass_fds=())
    try:
        assert await _all(child, "stdout") == b"done"
        assert await child.wait() == 4
    finally:
        await child.close()
