"""Runs one hook process on the host and collects what it said.

The hook runs as the daemon's user, never in a sandbox: it is operator code, trusted like the
daemon's config. It gets a clean environment, the workspace as its working directory, its input
on stdin, and its own process group, so a timeout or a cancellation kills everything it started.
Output is read while the process runs (a chatty hook never blocks on a full pipe) and only the
first `OUTPUT_CAP_BYTES` of each stream are kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pwd
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from daemon.hooks.config import HookSpec

__all__ = ["OUTPUT_CAP_BYTES", "HookProcess", "hook_environment", "run_hook"]

log = logging.getLogger(__name__)

OUTPUT_CAP_BYTES = 64 * 1024
"""Bytes kept of each of stdout and stderr; the rest is read and counted, not stored."""

#: After the hook exits or is killed, how long its pipes may take to reach end-of-file. Only a
#: process that escaped the group (setsid) can hold them open longer; it is not waited for.
_DRAIN_GRACE_S = 2.0

_SHELL = "/bin/sh"

#: Exit codes with which /bin/sh reports that the command could not be run at all
#: (126: not executable, 127: not found): a broken hook, not a hook that decided something.
_SHELL_CANNOT_RUN = (126, 127)


@dataclass(frozen=True)
class HookProcess:
    """What one hook process did."""

    exit_code: int | None
    """The exit status; negative: killed by that signal (also when /bin/sh reports it as
    128 + N); None: never started, or timed out."""
    stdout: str
    """What it wrote to stdout (decoded as UTF-8, invalid bytes replaced), at most the cap."""
    stderr: str
    """What it wrote to stderr, likewise capped."""
    stdout_bytes: int
    """Everything written to stdout, counted, including what was not kept."""
    stderr_bytes: int
    """Everything written to stderr, counted."""
    timed_out: bool = False
    """Killed because it ran past its timeout."""
    start_error: str = ""
    """Why it could not be started or run (missing or non-executable program)."""
    duration_ms: int = 0
    """Wall time from start to the end of its output."""

    @property
    def stdout_truncated(self) -> bool:
        """stdout was longer than the cap."""
        return self.stdout_bytes > OUTPUT_CAP_BYTES

    @property
    def stderr_truncated(self) -> bool:
        """stderr was longer than the cap."""
        return self.stderr_bytes > OUTPUT_CAP_BYTES


def hook_environment(spec: HookSpec, workspace: Path) -> dict[str, str]:
    """The whole environment a hook sees: nothing of the daemon's secrets or settings leaks.

    `CLAUDE_PROJECT_DIR` is what Claude Code sets for its hooks, so existing scripts that locate
    files through it keep working; `TOOLJAIL_WORKSPACE` says the same under our own name.
    """
    home = os.environ.get("HOME") or pwd.getpwuid(os.getuid()).pw_dir
    env = {
        "PATH": os.environ.get("PATH") or os.defpath,
        "HOME": home,
        "LANG": os.environ.get("LANG") or "C.UTF-8",
        "CLAUDE_PROJECT_DIR": str(workspace),
        "TOOLJAIL_WORKSPACE": str(workspace),
    }
    env.update(spec.env)
    return env


def _argv(spec: HookSpec) -> list[str]:
    if isinstance(spec.command, str):
        return [_SHELL, "-c", spec.command]
    return list(spec.command)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


class _ExitAwareProtocol(asyncio.subprocess.SubprocessStreamProtocol):
    """Says when the process itself has exited. `Process.wait()` also waits for every pipe to
    close, which a background child holding stdout can postpone until the timeout."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=65_536, loop=loop)
        self.exited = asyncio.Event()

    def process_exited(self) -> None:
        super().process_exited()
        self.exited.set()


class _Capture:
    """Reads one stream to its end, keeping the first `OUTPUT_CAP_BYTES`."""

    def __init__(self) -> None:
        self.kept = bytearray()
        self.total = 0

    async def read(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(65_536):
            self.total += len(chunk)
            room = OUTPUT_CAP_BYTES - len(self.kept)
            if room > 0:
                self.kept += chunk[:room]

    def text(self) -> str:
        return self.kept.decode("utf-8", errors="replace")


async def _feed(stdin: asyncio.StreamWriter, data: bytes) -> None:
    """Write the input and close stdin; a hook that never reads it is not an error."""
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        stdin.write(data)
        await stdin.drain()
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        stdin.close()
        await stdin.wait_closed()


async def _finish(tasks: list[asyncio.Task[None]]) -> None:
    """Let the readers reach end-of-file; give up on pipes held by an escaped process."""
    _, pending = await asyncio.wait(tasks, timeout=_DRAIN_GRACE_S)
    for task in pending:
        task.cancel()
    # gather, not a loop of suppressed awaits: a cancellation of this task must still propagate.
    await asyncio.gather(*tasks, return_exceptions=True)


async def _wait_exit(protocol: _ExitAwareProtocol) -> None:
    """Wait (briefly: the group was just sent SIGKILL) until the exit has been reaped."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(_DRAIN_GRACE_S):
            await protocol.exited.wait()


_Started = tuple[asyncio.SubprocessTransport, _ExitAwareProtocol]


async def _start(spec: HookSpec, workspace: Path) -> _Started:
    """Start the hook in a new session (so its pid is its process group id).

    The process exists before its pipes are connected; a cancellation in between would leave
    it, and anything it started, running. The start is therefore shielded: on cancellation it is
    completed, the group killed, and the cancellation re-raised.
    """
    loop = asyncio.get_running_loop()
    starting: asyncio.Future[_Started] = asyncio.ensure_future(
        loop.subprocess_exec(
            lambda: _ExitAwareProtocol(loop),
            *_argv(spec),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=workspace,
            env=hook_environment(spec, workspace),
            start_new_session=True,
        )
    )
    try:
        return await asyncio.shield(starting)
    except asyncio.CancelledError:
        with contextlib.suppress(OSError):
            transport, protocol = await starting
            _kill_group(transport.get_pid())
            await _wait_exit(protocol)
            transport.close()
        raise


async def run_hook(spec: HookSpec, stdin_data: bytes, workspace: Path) -> HookProcess:
    """Run `spec` once with `stdin_data` on its stdin, in `workspace`.

    Never raises for anything the hook does (a failure to start is reported in `start_error`);
    a cancellation kills the hook's process group and propagates.
    """
    started = time.monotonic()
    try:
        transport, protocol = await _start(spec, workspace)
    except OSError as exc:
        return HookProcess(
            exit_code=None,
            stdout="",
            stderr="",
            stdout_bytes=0,
            stderr_bytes=0,
            start_error=f"could not start {_argv(spec)[0]!r}: {exc.strerror or exc}",
            duration_ms=int((time.monotonic() - started) * 1000),
        )
    proc = asyncio.subprocess.Process(transport, protocol, asyncio.get_running_loop())
    pgid = proc.pid
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    out, err = _Capture(), _Capture()
    io_tasks = [
        asyncio.create_task(_feed(proc.stdin, stdin_data)),
        asyncio.create_task(out.read(proc.stdout)),
        asyncio.create_task(err.read(proc.stderr)),
    ]
    timed_out = False
    try:
        try:
            async with asyncio.timeout(spec.timeout_s):
                await protocol.exited.wait()
        except TimeoutError:
            timed_out = True
        # Also after a normal exit: whatever the hook left running in its group is killed, so
        # hooks never accumulate stray processes or hold their pipes open. (With no member left
        # the group id is unused and the kill finds nothing; Linux does not hand out a pid that
        # is still some group's id.)
        _kill_group(pgid)
        await protocol.exited.wait()
        await _finish(io_tasks)
    finally:
        if not protocol.exited.is_set() or not all(task.done() for task in io_tasks):
            # Cancelled: nothing the hook started survives the call. Wait for the readers and
            # the reaped exit before returning, or the caller may close the loop first and leak
            # descriptors and the process entry.
            _kill_group(pgid)
            for task in io_tasks:
                task.cancel()
            await asyncio.gather(*io_tasks, return_exceptions=True)
            await _wait_exit(protocol)
        # Releases the pipes even when a process that escaped the group still holds them.
        transport.close()
    exit_code = None if timed_out else proc.returncode
    start_error = ""
    if isinstance(spec.command, str) and exit_code in _SHELL_CANNOT_RUN:
        start_error = f"the shell could not run the command (exit {exit_code})"
        if err.total:
            start_error += f": {err.text().strip()}"
    elif isinstance(spec.command, str) and exit_code is not None and 128 < exit_code <= 128 + 64:
        # The shell reports a child killed by signal N as 128+N: a crash, not an answer.
        exit_code = 128 - exit_code
    return HookProcess(
        exit_code=exit_code,
        stdout=out.text(),
        stderr=err.text(),
        stdout_bytes=out.total,
        stderr_bytes=err.total,
        timed_out=timed_out,
        start_error=start_error,
        duration_ms=int((time.monotonic() - started) * 1000),
    )
