"""A child process read from the event loop without helper threads.

asyncio's own subprocess support (Python 3.11) waits for every child in a thread of its own and
wraps each pipe in a transport: about half a millisecond of daemon CPU per process, paid on every
Grep. Here the exit is watched through a pidfd (Linux 5.3+) and the pipes are read with plain
non-blocking reads; where pidfds are missing, the exit is awaited in a worker thread instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
from collections.abc import Sequence
from typing import IO

_CHUNK = 65536


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class Child:
    """A started process with stdout and stderr piped; `close` must be awaited in every case."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        cwd: str,
        pass_fds: tuple[int, ...] = (),
        stdin: int | None = None,
    ) -> None:
        """`stdin`: a file descriptor the child reads (the caller keeps and closes it); none by
        default."""
        # An argv list: no shell ever sees it.
        self._proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL if stdin is None else stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            pass_fds=pass_fds,
        )
        self._loop = asyncio.get_running_loop()
        self._exit = self._watch_exit()

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode

    def _watch_exit(self) -> asyncio.Future[int]:
        try:
            pidfd = os.pidfd_open(self._proc.pid)
        except (AttributeError, OSError):  # not Linux, or a kernel before 5.3
            return asyncio.ensure_future(asyncio.to_thread(self._proc.wait))
        exited: asyncio.Future[int] = self._loop.create_future()

        def ready() -> None:
            self._loop.remove_reader(pidfd)
            os.close(pidfd)
            if not exited.done():
                exited.set_result(self._proc.wait())  # exited already: returns at once

        self._loop.add_reader(pidfd, ready)
        return exited

    async def read(self, which: IO[bytes] | None) -> bytes:
        """The next chunk of a pipe (stdout or stderr); b"" at its end."""
        assert which is not None
        fd = which.fileno()
        os.set_blocking(fd, False)
        while True:
            try:
                return os.read(fd, _CHUNK)
            except BlockingIOError:
                pass
            readable: asyncio.Future[None] = self._loop.create_future()
            self._loop.add_reader(fd, _settle, readable)
            try:
                await readable
            finally:
                self._loop.remove_reader(fd)

    @property
    def stdout(self) -> IO[bytes] | None:
        return self._proc.stdout

    @property
    def stderr(self) -> IO[bytes] | None:
        return self._proc.stderr

    async def wait(self) -> int:
        """The exit code, once the process has ended."""
        return await asyncio.shield(self._exit)

    async def close(self) -> None:
        """Kill the process if it still runs, wait for it, release its pipes."""
        if self._proc.returncode is None and not self._exit.done():
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
        await asyncio.shield(self._exit)
        for pipe in (self._proc.stdout, self._proc.stderr):
            if pipe is not None:
                pipe.close()
