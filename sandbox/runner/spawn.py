"""Starting the command's bash as its own identity, fast (standard library only; see runner.py).

subprocess cannot change identity without a full fork of the runner (no vfork then), and Python
code between fork and exec costs more still: together several milliseconds per warm call. So the
runner takes the command's uid and gid as its real and effective ids for a moment (its saved ids
stay root, so it can come back), walks to the working directory with the command's own rights,
and posix_spawns bash (vfork-like: the child borrows the runner's memory until it execs) into it;
then it is root again. The child execs bash as the command's identity (all four ids; exec makes
the saved ids the effective ones) with no capability and no supplementary group. No command of
the container exists while the runner wears its identity, so nothing can signal the runner then.
(The runner, root without CAP_DAC_OVERRIDE, could not even enter a workspace it does not own.)
"""

from __future__ import annotations

import errno
import os
import time

try:  # signal's C half: signal.py turns its numbers into enums, 3 ms of CPU a container
    import _signal as signals  # type: ignore[import-not-found,unused-ignore]
except ImportError:
    import signal as signals

BASH = "/bin/bash"
#: The command's OOM score: the kernel's first choice when memory runs out, so the runner lives
#: to report (see sandbox/hardening.py for a command that lowers it).
COMMAND_OOM_SCORE_ADJ = 1000
_OOM_SCORE = "/proc/self/oom_score_adj"
#: Signals the runner ignores, which an exec would keep ignored (`yes | head` would then
#: complain about a broken pipe instead of ending quietly): back to their defaults in the child.
#: Python ignores the first ones; SIGINT, `ignore_interrupts`.
_PYTHON_IGNORES = tuple(
    getattr(signals, name)
    for name in ("SIGPIPE", "SIGXFSZ", "SIGXFZ", "SIGINT")
    if hasattr(signals, name)
)
SIGKILL: int = signals.SIGKILL


def ignore_interrupts() -> None:
    """The runner ignores SIGINT: in a container with no root its commands share its uid and
    may signal it, and Python's handler would end it, and their own call with it. Nothing asks
    the runner to stop that way (the daemon ends a command through the runner's request
    stream, and a container through the engine)."""
    signals.signal(signals.SIGINT, signals.SIG_IGN)


class Spawned:
    """The command's bash, as the runner waits for it."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """The exit status once bash has exited (negative: killed by that signal), else None."""
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float) -> int | None:
        """Wait up to `timeout` seconds for bash to exit; its status, or None when it has not
        (a process stuck in the kernel cannot be waited for: the container's end takes it)."""
        deadline = time.monotonic() + timeout
        while self.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        return self.returncode


def spawn_bash(
    argv: list[str],
    env: dict[str, str],
    *,
    workspace: str,
    cwd: str,
    stdout: int,
    handed: dict[int, int],
    identity: tuple[int, int] | None,
    stdin: int | None = None,
    stderr: int | None = None,
) -> Spawned:
    """Start bash with `argv` in `cwd` (inside `workspace`), stdin from `stdin` (None:
    /dev/null), stdout to `stdout` and stderr to `stderr` (None: with stdout), `handed` (its
    fd: ours) open, in a session of its own, as `identity` (None: as the runner). OSError when
    the directory cannot be entered or bash not started."""
    actions: list[tuple[int, int, str, int, int] | tuple[int, int, int]] = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)
        if stdin is None
        else (os.POSIX_SPAWN_DUP2, stdin, 0),
        (os.POSIX_SPAWN_DUP2, stdout, 1),
        (os.POSIX_SPAWN_DUP2, stdout if stderr is None else stderr, 2),
        *((os.POSIX_SPAWN_DUP2, fd, target) for target, fd in handed.items()),
    ]
    with _OomScoreForChildren(), As(identity):
        here = os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            directory = _open_beneath(workspace, cwd)
            try:
                os.fchdir(directory)
            finally:
                os.close(directory)
            pid = os.posix_spawn(
                BASH, argv, env, file_actions=actions, setsid=True, setsigdef=_PYTHON_IGNORES
            )
        finally:
            try:
                os.fchdir(here)
            except OSError:
                pass
            os.close(here)
    return Spawned(pid)


def _open_beneath(workspace: str, cwd: str) -> int:
    """`cwd`, opened from the workspace one component at a time without following a symbolic
    link (openat2 is refused by the runner's own filter)."""
    relative = os.path.relpath(cwd, workspace)
    parts = [] if relative == os.curdir else [part for part in relative.split("/") if part]
    if os.pardir in parts:
        raise OSError(errno.EXDEV, "it is not inside the workspace", cwd)
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(workspace, flags)
    for part in parts:
        try:
            child = os.open(part, flags, dir_fd=fd)
        finally:
            os.close(fd)
        fd = child
    return fd


# Context managers as classes: contextlib costs every container 3 ms of CPU to import.


class As:
    """The command's ids as the runner's real and effective ids; the saved ones stay root, so
    the runner is root again afterwards (capabilities included)."""

    def __init__(self, identity: tuple[int, int] | None) -> None:
        self._identity = identity

    def __enter__(self) -> None:
        if self._identity is None:
            return
        uid, gid = self._identity
        if os.getgroups():
            os.setgroups([])  # inherited by the child: the runner keeps none (it runs nothing else)
        os.setresgid(gid, gid, 0)
        try:
            os.setresuid(uid, uid, 0)
        except BaseException:
            os.setresgid(0, 0, 0)
            raise

    def __exit__(self, *_: object) -> None:
        if self._identity is None:
            return
        try:
            os.setresuid(0, 0, 0)
        finally:
            os.setresgid(0, 0, 0)


class _OomScoreForChildren:
    """The runner's own OOM score is what the child inherits: raised for the spawn, set back
    right after (raising needs no privilege; the runner has no threads)."""

    def __init__(self) -> None:
        self._raised = False

    def __enter__(self) -> None:
        try:
            _write(_OOM_SCORE, str(COMMAND_OOM_SCORE_ADJ))
        except OSError:
            return
        self._raised = True

    def __exit__(self, *_: object) -> None:
        if self._raised:
            try:
                _write(_OOM_SCORE, "0")
            except OSError:
                pass


def _write(path: str, text: str) -> None:
    with open(path, "wb") as file:  # bytes: a text codec would be one more import
        file.write(text.encode())


def command_pipes(identity: tuple[int, int] | None, count: int) -> list[tuple[int, int]]:
    """`count` pipes for the command's use, made as its identity (one switch for all): the
    kernel charges a pipe's pages to the user that made it, and those the runner (root, shared
    by every container) made for commands were one tenant's to keep alive until root's limit
    shrank everyone's new pipes (attacker round 111 passed them on to a background command of
    its own)."""
    with As(identity):
        return [os.pipe() for _ in range(count)]
