"""The daemon's one way to run a program on the host, read from the event loop without helpers.

asyncio's own subprocess support (Python 3.11) waits for every child in a thread of its own and
wraps each pipe in a transport: about half a millisecond of daemon CPU per process, paid on every
Grep. Here the exit is watched through a pidfd (Linux 5.3+) and the pipes are read and written with
plain non-blocking calls; where pidfds are missing, the exit is awaited in a worker thread instead.
The exit is known as soon as the process ends, whoever still holds its pipes.

`Child` is a started process; `run_child` runs one to its end with input, a timeout and capped
output (hooks, `opa check`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Literal

_CHUNK = 65536
#: After a run's process ended or was killed, how long its pipes may take to reach end-of-file.
#: Only a process that left the group (setsid) can hold them open longer; it is not waited for.
_DRAIN_GRACE_S = 2.0


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class Child:
    """A started process; `close` must be awaited in every case.

    stdout is piped unless `stdout="null"`; stderr is piped, merged into stdout, or discarded.
    stdin is /dev/null, a descriptor the caller keeps and closes, or a pipe fed with `feed`.
    With `new_session` the process leads a process group of its own, so `kill_group` reaches
    everything it started (unless that left the group itself).
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        cwd: str | Path | None = None,
        env: Mapping[str, str] | None = None,
        pass_fds: tuple[int, ...] = (),
        stdin: int | Literal["pipe"] | None = None,
        stdout: Literal["pipe", "null"] = "pipe",
        stderr: Literal["pipe", "stdout", "null"] = "pipe",
        new_session: bool = False,
    ) -> None:
        """Start `argv` (a list: no shell ever sees it); raises OSError when it cannot start."""
        stdin_arg: int | None = (
            subprocess.DEVNULL if stdin is None else subprocess.PIPE if stdin == "pipe" else stdin
        )
        self._proc = subprocess.Popen(
            list(argv),
            stdin=stdin_arg,
            stdout=subprocess.PIPE if stdout == "pipe" else subprocess.DEVNULL,
            stderr={
                "pipe": subprocess.PIPE,
                "stdout": subprocess.STDOUT,
                "null": subprocess.DEVNULL,
            }[stderr],
            cwd=cwd,
            env=dict(env) if env is not None else None,
            pass_fds=pass_fds,
            start_new_session=new_session,
        )
        self._loop = asyncio.get_running_loop()
        self._exit = self._watch_exit()

    @property
    def pid(self) -> int:
        """The process id (its process group id too, with `new_session`)."""
        return self._proc.pid

    @property
    def returncode(self) -> int | None:
        """The exit status once reaped; negative: killed by that signal."""
        return self._proc.returncode

    @property
    def stdout(self) -> IO[bytes] | None:
        return self._proc.stdout

    @property
    def stderr(self) -> IO[bytes] | None:
        return self._proc.stderr

    @property
    def exited(self) -> bool:
        """The process has ended (and was reaped)."""
        return self._exit.done()

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
            await self._ready(fd, self._loop.add_reader, self._loop.remove_reader)

    async def feed(self, data: bytes) -> None:
        """Write `data` to stdin and close it; a process that does not read it is not an error."""
        pipe = self._proc.stdin
        assert pipe is not None
        fd = pipe.fileno()
        os.set_blocking(fd, False)
        view = memoryview(data)
        try:
            while view:
                try:
                    view = view[os.write(fd, view[:_CHUNK]) :]
                except BlockingIOError:
                    await self._ready(fd, self._loop.add_writer, self._loop.remove_writer)
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            pipe.close()

    async def _ready(
        self, fd: int, add: Callable[..., object], remove: Callable[[int], object]
    ) -> None:
        ready: asyncio.Future[None] = self._loop.create_future()
        add(fd, _settle, ready)
        try:
            await ready
        finally:
            remove(fd)

    async def wait(self) -> int:
        """The exit status, once the process has ended."""
        return await asyncio.shield(self._exit)

    def terminate(self) -> None:
        """SIGTERM the process if it still runs."""
        if self._proc.returncode is None and not self._exit.done():
            with contextlib.suppress(ProcessLookupError):
                self._proc.terminate()

    def kill(self) -> None:
        """SIGKILL the process if it still runs."""
        if self._proc.returncode is None and not self._exit.done():
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()

    def kill_group(self) -> None:
        """SIGKILL the process group it leads (`new_session`): it and what it started. Also
        after the leader exited: no pid is handed out while it is still some group's id."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, signal.SIGKILL)

    async def close(self) -> None:
        """Kill the process if it still runs, wait for it, release its pipes."""
        self.kill()
        await asyncio.shield(self._exit)
        for pipe in (self._proc.stdin, self._proc.stdout, self._proc.stderr):
            if pipe is not None:
                pipe.close()


@dataclass
class Capture:
    """One stream read to its end: the first `cap` bytes kept, all of them counted."""

    cap: int
    kept: bytearray = field(default_factory=bytearray)
    total: int = 0

    async def read_from(self, child: Child, which: IO[bytes] | None) -> None:
        """Read `which` of `child` until its end."""
        while chunk := await child.read(which):
            self.total += len(chunk)
            room = self.cap - len(self.kept)
            if room > 0:
                self.kept += chunk[:room]

    def text(self) -> str:
        """What was kept, as UTF-8 (invalid bytes replaced)."""
        return self.kept.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class Finished:
    """A process run to its end by `run_child`."""

    exit_code: int | None
    """The exit status (negative: killed by that signal); None when it timed out."""
    stdout: Capture
    stderr: Capture
    timed_out: bool
    duration_s: float


async def run_child(
    argv: Sequence[str],
    *,
    input_data: bytes = b"",
    timeout_s: float,
    output_cap: int,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    merge_stderr: bool = False,
) -> Finished:
    """Run `argv` in a process group of its own with `input_data` on stdin, reading its output
    while it runs (a chatty program never blocks on a full pipe), until it exits or `timeout_s`
    passes. Whatever is left of its group is then killed, also after a normal exit, so nothing it
    started outlives the run; a cancellation kills the group too and propagates. Raises OSError
    when the program cannot be started."""
    started = time.monotonic()
    child = Child(
        argv,
        cwd=cwd,
        env=env,
        stdin="pipe",
        stderr="stdout" if merge_stderr else "pipe",
        new_session=True,
    )
    out, err = Capture(output_cap), Capture(output_cap)
    io = [
        asyncio.create_task(child.feed(input_data)),
        asyncio.create_task(out.read_from(child, child.stdout)),
    ]
    if not merge_stderr:
        io.append(asyncio.create_task(err.read_from(child, child.stderr)))
    timed_out = False
    try:
        try:
            async with asyncio.timeout(timeout_s):
                await child.wait()
        except TimeoutError:
            timed_out = True
        child.kill_group()
        await child.wait()
        _, pending = await asyncio.wait(io, timeout=_DRAIN_GRACE_S)
        for task in pending:
            task.cancel()
        # gather, not a loop of suppressed awaits: a cancellation of this task must propagate.
        await asyncio.gather(*io, return_exceptions=True)
    finally:
        if not all(task.done() for task in io) or not child.exited:
            child.kill_group()
            for task in io:
                task.cancel()
            await asyncio.gather(*io, return_exceptions=True)
        await child.close()
    return Finished(
        exit_code=None if timed_out else child.returncode,
        stdout=out,
        stderr=err,
        timed_out=timed_out,
        duration_s=time.monotonic() - started,
    )
