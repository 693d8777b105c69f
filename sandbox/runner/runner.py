"""tooljail's in-container runner: read one request on stdin, carry it out, answer on stdout, exit.

This file is bind-mounted read-only into every sandbox container and run by the image's own
``python3`` with the standard library only: it never imports the tooljail package (which is not in
the container), so the tiny wire format below is duplicated knowingly in ``sandbox/protocol.py``.

Wire format, both directions: a 4-byte big-endian length, then that many bytes of a UTF-8 JSON
object. The host sends exactly one request; the runner answers with messages, each an object with a
``"type"``: ``"progress"`` (``{"output": chunk}``, while a Bash command runs, coalesced to at most
one every ``PROGRESS_INTERVAL_S``, each chunk at most ``MAX_PROGRESS_BYTES``), then ``"result"``
(the last message). A command that finishes within one interval sends no progress at all. The runner
writes nothing before it has read the whole request, so a host that attaches late loses nothing.

Exit codes in results follow the shell convention: 0-255 for a normal exit, 128+N for a process
killed by signal N (a timeout or the OOM killer shows up as 137, SIGKILL), -1 when unknown.

Before it reads a request the runner confines itself (``confine.py``: a seccomp filter against
setuid/setgid files and device nodes, non-dumpable). The command runs as ``--run-as`` (never
root), the runner itself stays the container's root: the command can neither write the runner's
answer nor signal or inspect it. Every request names the workspace it expects (``workspace``,
``workspace_id``: device and inode) and how its repository is held (``pins``: paths mounted over
themselves, the repository's own read-only); a container whose mounted workspace or repository is
another one, or whose repository is not held so, refuses to do anything.
"""

from __future__ import annotations

import errno
import os
import select
import stat
import struct
import sys
import time

TYPE_CHECKING = False  # what typing.TYPE_CHECKING is at run time, without its 10 ms import
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

# Every container starts this file, so what it imports is paid once per container (a churn of
# containers pays it on every call): argparse, pathlib, dataclasses, platform, hashlib and
# asyncio cost it about 80 ms of CPU (a quarter of the engine's own cost of a container, measured
# in the sandbox image); json, re, enum (through signal), contextlib and collections another 7 ms
# (hence wire.py, spawn.signals and context managers written as classes). What only some requests
# need is imported when one comes: hashlib for a Write, forward.py (asyncio) for egress.
try:  # in the container: this file's folder (read-only) is on sys.path
    import confine  # type: ignore[import-not-found,unused-ignore]
    import mcp_stdio  # type: ignore[import-not-found,unused-ignore]
    import spawn  # type: ignore[import-not-found,unused-ignore]
    import wire  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # on the host, as part of the sandbox package (tests)
    from sandbox.runner import confine, mcp_stdio, spawn, wire

PROTOCOL_VERSION = 2
_HEADER = struct.Struct(">I")
#: Largest request accepted (a Write's content travels in it).
MAX_REQUEST_BYTES = 256 << 20
#: A request's header may announce this many raw bytes right after it (a Write's content as
#: UTF-8: no JSON escapes, which cost up to 6 bytes per character on the host and here).
ATTACHED_BYTES = "attached_bytes"
#: Where `read_request` puts those bytes in the request.
ATTACHED = "attached"
#: Once the first byte of a request arrived, the rest must follow within this time.
REQUEST_READ_TIMEOUT_S = 60.0
#: After the shell exited (or was killed), how long to keep reading output that its leftovers, if
#: any escaped the process group, still write; the container is destroyed right after anyway.
DRAIN_GRACE_S = 0.25
#: After answering, how long to wait for the host to hang up before exiting anyway.
HANG_UP_WAIT_S = 1.0
#: The descriptor the shell's EXIT trap writes its final directory to (see bash_env.sh): a high
#: number so it does not collide with scripts that use 3-9 themselves; below 63, which bash uses
#: for process substitution.
CWD_FD = 31
GO_FD = 30
"""Where bash_env.sh waits for the runner's go: the runner wears the command's ids while it
spawns bash, and until it has taken its own back the command must not run (it could signal it)."""
#: Sourced by bash through BASH_ENV before the command: a file beside the runner, read-only in
#: the container and readable by the command's identity.
BASH_ENV_FILE = os.path.join(os.path.dirname(__file__), "bash_env.sh")
_CHUNK = 1 << 16
_MARKER = "\n[... {n} bytes of output omitted ...]\n"
#: Progress output is sent at most this often (the host relays it to people, not to the model).
PROGRESS_INTERVAL_S = 0.1
#: Largest output chunk of one progress message, in UTF-8 bytes (``sandbox/protocol.py`` agrees).
MAX_PROGRESS_BYTES = 8192
_SKIPPED = "[... {n} bytes not shown live ...]\n"
_SKIPPED_ROOM = 64
"""Bytes of a progress chunk kept free for the skipped-bytes note."""

if TYPE_CHECKING:
    #: Sends one message to the host (annotations alone use it: none is evaluated at run time).
    Emit = Callable[[dict[str, Any]], None]


class RequestError(Exception):
    """The request could not be read or understood; answered with an error result."""


# --- framing -----------------------------------------------------------------------------------


def read_exact(fd: int, size: int, first_byte_timeout: float | None) -> bytes | None:
    """Read exactly `size` bytes; None on EOF before the first byte or when nothing came in time."""
    buf = bytearray()
    deadline = None if first_byte_timeout is None else time.monotonic() + first_byte_timeout
    while len(buf) < size:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                if buf:
                    raise RequestError("timed out in the middle of a request")
                return None
        data = os.read(fd, size - len(buf))
        if not data:
            if buf:
                raise RequestError("stdin closed in the middle of a request")
            return None
        buf += data
        # The rest of a started request must come quickly; the idle wait only applies to byte one.
        deadline = time.monotonic() + REQUEST_READ_TIMEOUT_S
    return bytes(buf)


def read_request(fd: int, idle_timeout: float | None) -> dict[str, Any] | None:
    """Read one length-prefixed JSON request; None when the host went away without sending one."""
    header = read_exact(fd, _HEADER.size, idle_timeout)
    if header is None:
        return None
    (length,) = _HEADER.unpack(header)
    if length > MAX_REQUEST_BYTES:
        raise RequestError(f"request of {length} bytes exceeds {MAX_REQUEST_BYTES}")
    body = read_exact(fd, length, REQUEST_READ_TIMEOUT_S)
    if body is None:
        raise RequestError("stdin closed before the request body")
    request = wire.loads(body.decode("utf-8"))
    if not isinstance(request, dict):
        raise RequestError("the request is not a JSON object")
    attached = request.pop(ATTACHED_BYTES, None)
    if attached is not None:
        if not isinstance(attached, int) or not 0 <= attached <= MAX_REQUEST_BYTES - length:
            raise RequestError(f"attached_bytes {attached!r} is out of range")
        data = read_exact(fd, attached, REQUEST_READ_TIMEOUT_S) if attached else b""
        if data is None:
            raise RequestError("stdin closed before the request's attached bytes")
        request[ATTACHED] = data
    return request


def write_message(fd: int, message: dict[str, Any]) -> None:
    """Write one length-prefixed JSON message, all of it."""
    body = wire.dumps(message)
    try:
        encoded = body.encode("utf-8")
    except UnicodeEncodeError:
        # A file name that is not UTF-8 (its bytes held as lone surrogates): as JSON escapes,
        # which decode back to the same surrogates on the host.
        encoded = wire.dumps(message, ascii_only=True).encode("ascii")
    view = memoryview(_HEADER.pack(len(encoded)) + encoded)
    while view:
        written = os.write(fd, view)
        view = view[written:]


# --- output capture ----------------------------------------------------------------------------


def _utf8_head(data: bytes) -> bytes:
    """`data` without a trailing incomplete UTF-8 sequence."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte < 0x80:
            return data
        if byte >= 0xC0:  # lead byte: keep it only if its sequence is complete
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return data if back >= need else data[:-back]
    return data


def _utf8_tail(data: bytes) -> bytes:
    """`data` without leading UTF-8 continuation bytes (of a character cut off in front)."""
    start = 0
    while start < min(3, len(data)) and 0x80 <= data[start] < 0xC0:
        start += 1
    return data[start:]


class OutputSink:
    """Keeps the first and last `limit`/2 bytes of a stream and counts the rest.

    Memory stays below 1.5 x `limit` whatever the stream's size: the tail is trimmed whenever it
    grows to twice its share, which keeps trimming amortised O(1) per byte.
    """

    def __init__(self, limit: int) -> None:
        self.head_limit = max(1, limit // 2)
        self.tail_limit = max(1, limit - self.head_limit)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > 2 * self.tail_limit:
                del self.tail[: len(self.tail) - self.tail_limit]

    def render(self) -> tuple[str, bool]:
        """The kept text (head, an omission marker, tail) and whether anything was left out."""
        head = bytes(self.head)
        tail = bytes(self.tail[-self.tail_limit :])
        if len(head) + len(tail) >= self.total:
            return (head + tail).decode("utf-8", "replace"), False
        head, tail = _utf8_head(head), _utf8_tail(tail)
        omitted = self.total - len(head) - len(tail)
        text = head.decode("utf-8", "replace") + _MARKER.format(n=omitted)
        return text + tail.decode("utf-8", "replace"), True


class ProgressStream:
    """Forwards output to the host while a command runs, coalesced in time and bounded in size.

    Output collects in a pending buffer that is sent at most once per `interval`; when more than
    `max_bytes` piled up in between, only its end is sent (what the command is doing now) with a
    note of how much was skipped. The pending buffer never exceeds 2 x `max_bytes`. Nothing is
    sent for a command that ends within the first interval: its result follows at once.
    """

    def __init__(
        self,
        emit: Emit,
        started: float,
        interval: float = PROGRESS_INTERVAL_S,
        max_bytes: int = MAX_PROGRESS_BYTES,
    ) -> None:
        self._emit = emit
        self._interval = interval
        self._max = max_bytes
        self._due = started + interval
        self._pending = bytearray()
        self._skipped = 0
        self.sent = 0

    def add(self, data: bytes) -> None:
        self._pending += data
        excess = len(self._pending) - 2 * self._max
        if excess > 0:
            self._skipped += excess
            del self._pending[:excess]

    @property
    def pending_bytes(self) -> int:
        """Output waiting to be sent."""
        return len(self._pending)

    def wait_s(self, now: float) -> float | None:
        """Seconds until pending output is due to be sent; None when nothing is pending."""
        return max(0.0, self._due - now) if self._pending else None

    def flush(self, now: float, *, final: bool = False) -> None:
        """Send pending output if it is due (or, at the end, if progress was being sent)."""
        if not self._pending or (final and self.sent == 0) or (not final and now < self._due):
            return
        data = bytes(self._pending)
        # An incomplete character at the end waits for its other bytes (unless nothing will come).
        complete = data if final else _utf8_head(data)
        self._pending = bytearray(data[len(complete) :])
        if self._skipped or len(complete) > self._max:
            room = max(1, self._max - _SKIPPED_ROOM)
            kept = _utf8_tail(complete[max(0, len(complete) - room) :])
            self._skipped += len(complete) - len(kept)
            complete = kept
        if not complete:
            return
        note = _SKIPPED.format(n=self._skipped) if self._skipped else ""
        self._skipped = 0
        self._emit({"type": "progress", "output": note + complete.decode("utf-8", "replace")})
        self.sent += 1
        self._due = now + self._interval


# --- bash --------------------------------------------------------------------------------------


def oom_kill_count() -> int | None:
    """OOM kills so far in this container's memory cgroup (v2 or v1), None when unreadable."""
    for path in ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"):
        try:
            with open(path, "rb") as table:  # bytes: a text codec would be one more import
                lines = table.read().splitlines()
        except OSError:
            continue
        for line in lines:
            key, _, value = line.partition(b" ")
            if key == b"oom_kill" and value.strip().isdigit():
                return int(value)
    return None


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, spawn.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _read_available(fd: int) -> bytes:
    os.set_blocking(fd, False)
    try:
        return os.read(fd, 4096)
    except (BlockingIOError, OSError):
        return b""


def _exit_code(returncode: int | None) -> int:
    if returncode is None:
        return -1
    return 128 - returncode if returncode < 0 else returncode


class _Started:
    """A command started by `_start`: its process and the read ends of its pipes."""

    def __init__(self, proc: spawn.Spawned, out_r: int, err_r: int | None, cwd_r: int) -> None:
        self.proc = proc
        self.out_r = out_r
        self.err_r = err_r
        """stderr apart (None: merged into stdout)."""
        self.cwd_r = cwd_r
        """Where bash_env.sh's EXIT trap writes the final directory."""


def _start(
    argv: list[str],
    request: dict[str, Any],
    identity: tuple[int, int] | None,
    *,
    stdin: int | None = None,
    separate_stderr: bool = False,
) -> _Started:
    """Spawn bash with `argv` in the request's cwd as `identity` (BASH_ENV=bash_env.sh) and let
    it go once the runner is itself again; OSError when it could not start (nothing ran)."""
    if not os.path.isfile(BASH_ENV_FILE):
        # Without it bash would not wait for the go (GO_FD): the command is never run so (its
        # folder removed under a running container, attacker round 79).
        raise OSError(errno.ENOENT, "the runner's bash_env.sh is gone", BASH_ENV_FILE)
    cwd = str(request["cwd"])
    (out_r, out_w), (cwd_r, cwd_w), (go_r, go_w), *err = spawn.command_pipes(
        identity, 4 if separate_stderr else 3
    )
    err_r, err_w = err[0] if err else (None, None)
    env = dict(os.environ, BASH_ENV=str(BASH_ENV_FILE))
    try:
        proc = spawn.spawn_bash(
            argv,
            env,
            workspace=str(request.get("workspace") or cwd),
            cwd=cwd,
            stdout=out_w,
            handed={CWD_FD: cwd_w, GO_FD: go_r},
            identity=identity,
            stdin=stdin,
            stderr=err_w,
        )
    except OSError:
        for fd in (out_r, err_r, cwd_r, go_w):
            if fd is not None:
                os.close(fd)
        raise
    finally:
        for fd in (out_w, err_w, cwd_w, go_r):
            if fd is not None:
                os.close(fd)
    # The runner is itself again (spawn_bash restored its ids): the command may start.
    os.write(go_w, b"g")
    os.close(go_w)
    return _Started(proc, out_r, err_r, cwd_r)


def _oom_since(before: int | None) -> bool:
    after = oom_kill_count()
    return before is not None and after is not None and after > before


def run_bash(
    request: dict[str, Any], identity: tuple[int, int] | None, emit: Emit | None = None
) -> dict[str, Any]:
    """Run `bash -c command` as `identity` (None: as the runner) in its own process group;
    stdout and stderr merged into one pipe.

    With `emit`, output also goes to the host as progress messages while the command runs.
    """
    command = str(request["command"])
    cwd = str(request["cwd"])
    timeout_s = int(request["timeout_ms"]) / 1000.0
    sink = OutputSink(int(request.get("output_limit_bytes") or 1 << 20))
    oom_before = oom_kill_count()
    started = time.monotonic()
    try:
        run = _start(["bash", "--noprofile", "--norc", "-c", command], request, identity)
    except OSError as exc:
        who = f"uid {identity[0]}" if identity else "the runner"
        if _cwd_lost(request, exc):
            # Never run it elsewhere: the policy judged it, relative paths and all, in that
            # directory (attacker round 111). The daemon starts the next command at the root.
            return {
                "exit_code": -1,
                "error": f"the working directory {cwd} cannot be entered by the sandbox's "
                f"identity ({who}): {exc.strerror}; nothing ran",
                "cwd_reset": f"{cwd}: {exc.strerror}",
            }
        why = f"it does not exist, or the sandbox's identity ({who}) may not enter it"
        return {"exit_code": -1, "error": f"cannot start bash in {cwd}: {exc.strerror}; {why}"}
    proc, cwd_r = run.proc, run.cwd_r
    spawned = time.monotonic()
    progress = ProgressStream(emit, started) if emit is not None else None
    # A background command outlives its call, not its daemon: stdin (the daemon's attach
    # stream, closed with it) ending stops it.
    host = 0 if request.get("stop_without_host") else None
    timed_out = _pump(proc, {run.out_r: _Output(sink, progress)}, started + timeout_s, host)
    exited = time.monotonic()
    # surrogateescape: a directory whose name is not UTF-8 stays the same directory next time.
    final_cwd = "" if timed_out else _read_available(cwd_r).decode("utf-8", "surrogateescape")
    os.close(cwd_r)
    text, truncated = sink.render()
    return {
        "exit_code": _exit_code(proc.returncode),
        "output": text,
        "output_bytes": sink.total,
        "output_truncated": truncated,
        "timed_out": timed_out,
        "oom_killed": _oom_since(oom_before),
        "final_cwd": final_cwd.strip().rsplit("\n", 1)[-1],
        "duration_ms": int((time.monotonic() - started) * 1000),
        "timeline": [["spawned", spawned], ["exited", exited]],
    }


def _cwd_lost(request: dict[str, Any], exc: OSError) -> bool:
    """Whether bash could not start because the command's identity may no longer enter the
    session's working directory (below the workspace root): another principal sharing the
    workspace made it theirs alone (attacker round 110), or it went away."""
    workspace = request.get("workspace")
    return bool(workspace) and request["cwd"] != workspace and exc.errno in _NOT_ENTERED


#: Why a directory inside the workspace could not be entered by the command's identity.
_NOT_ENTERED = {errno.EACCES, errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.EPERM}


class _Output:
    """Where the command's output goes: the kept result, and the live progress if any."""

    def __init__(self, sink: OutputSink, progress: ProgressStream | None) -> None:
        self.sink = sink
        self.progress = progress

    def add(self, data: bytes) -> None:
        self.sink.add(data)
        if self.progress is not None:
            self.progress.add(data)
            self.progress.flush(time.monotonic())

    def wait_s(self, now: float) -> float | None:
        return None if self.progress is None else self.progress.wait_s(now)

    def tick(self, now: float) -> None:
        if self.progress is not None:
            self.progress.flush(now)

    def finish(self) -> None:
        if self.progress is not None:
            self.progress.flush(time.monotonic(), final=True)


def _pump(
    proc: spawn.Spawned, outputs: dict[int, _Output], deadline: float, host: int | None = None
) -> bool:
    """Copy each pipe of `outputs` into its output until the command exits, the deadline
    passes or `host` (a descriptor) reaches its end; True when it timed out. The pipes are
    closed here.

    The call ends when the command itself exits, not when its pipes close: a background process
    holding them open must not hang the call. Whatever is left of the process group is killed
    then.
    """
    try:
        exit_fd: int | None = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        exit_fd = None  # old kernel: poll instead
    timed_out = False
    open_pipes = dict(outputs)
    try:
        while proc.poll() is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            watched = list(open_pipes)
            if exit_fd is not None:
                watched.append(exit_fd)  # readable once the command has exited
            if host is not None:
                watched.append(host)
            wait = remaining if exit_fd is not None else min(remaining, 0.05)
            for out in outputs.values():
                progress_wait = out.wait_s(time.monotonic())
                if progress_wait is not None:
                    wait = min(wait, progress_wait)  # wake up to send pending progress on time
            ready = select.select(watched, [], [], wait)[0]
            if host is not None and host in ready and not os.read(host, 1 << 16):
                break  # the host is gone: nobody will ever read the result
            for fd in ready:
                if fd in open_pipes:
                    data = os.read(fd, _CHUNK)
                    if data:
                        open_pipes[fd].add(data)
                    else:
                        del open_pipes[fd]
            if not ready:
                for out in outputs.values():
                    out.tick(time.monotonic())
    finally:
        if exit_fd is not None:
            os.close(exit_fd)
    _kill_group(proc.pid)
    grace = time.monotonic() + DRAIN_GRACE_S
    for fd, out in open_pipes.items():
        _drain(fd, out, grace)
    for fd, out in outputs.items():
        out.finish()
        os.close(fd)
    proc.wait(timeout=5)
    return timed_out


def _drain(fd: int, out: _Output, deadline: float) -> None:
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
            return
        data = os.read(fd, _CHUNK)
        if not data:
            return
        out.add(data)


# --- exec --------------------------------------------------------------------------------------

#: Largest standard input of an exec request: it is written whole before the program starts (so
#: the runner never waits on a program that does not read).
MAX_STDIN_BYTES = 1 << 20
#: bash only looks the program up and becomes it (`exec`), after the go (see bash_env.sh).
_EXEC_COMMAND = 'trap - EXIT; exec 31>&-; exec -- "$@"'


def _stdin_file(data: bytes) -> int:
    """A memory file holding all of `data`, read from its start: the program's standard input,
    charged to the container's memory (a pipe would be charged to the runner's user, root,
    which every container shares)."""
    memory = os.memfd_create("stdin", os.MFD_CLOEXEC)
    try:
        if data and os.write(memory, data) != len(data):
            raise OSError(errno.EFBIG, "the memory file took only part of the input")
        os.lseek(memory, 0, os.SEEK_SET)
    except OSError:
        os.close(memory)
        raise
    return memory


def run_exec(
    request: dict[str, Any], identity: tuple[int, int] | None, emit: Emit | None = None
) -> dict[str, Any]:
    """Run a program (no shell of the model's: bash only execs it) as `identity`, with the
    request's stdin, stdout and stderr kept apart; progress shows stderr and stdout as they
    come."""
    argv = [str(arg) for arg in request["argv"]]
    if not argv or not argv[0]:
        return {"exit_code": -1, "error": "an exec request needs a program"}
    cwd = str(request["cwd"])
    timeout_s = int(request["timeout_ms"]) / 1000.0
    limit = int(request.get("output_limit_bytes") or 1 << 20)
    stdin = str(request.get("stdin") or "").encode("utf-8", "surrogateescape")
    if len(stdin) > MAX_STDIN_BYTES:
        return {"exit_code": -1, "error": f"the input is over {MAX_STDIN_BYTES} bytes"}
    try:
        in_r = _stdin_file(stdin)
    except OSError as exc:
        return {"exit_code": -1, "error": f"cannot hand the program its input: {exc.strerror}"}
    stdout, stderr = OutputSink(limit), OutputSink(max(1, limit // 16))
    oom_before = oom_kill_count()
    started = time.monotonic()
    command = ["bash", "--noprofile", "--norc", "-c", _EXEC_COMMAND, argv[0], *argv]
    try:
        run = _start(command, request, identity, stdin=in_r, separate_stderr=True)
    except OSError as exc:
        return {"exit_code": -1, "error": f"cannot start {argv[0]} in {cwd}: {exc.strerror}"}
    finally:
        os.close(in_r)
    os.close(run.cwd_r)
    assert run.err_r is not None
    progress = ProgressStream(emit, started) if emit is not None else None
    outputs = {run.out_r: _Output(stdout, progress), run.err_r: _Output(stderr, progress)}
    timed_out = _pump(run.proc, outputs, started + timeout_s)
    text, truncated = stdout.render()
    errors, _ = stderr.render()
    return {
        "exit_code": _exit_code(run.proc.returncode),
        "output": text,
        "stderr": errors,
        "output_bytes": stdout.total,
        "output_truncated": truncated,
        "timed_out": timed_out,
        "oom_killed": _oom_since(oom_before),
        "duration_ms": int((time.monotonic() - started) * 1000),
    }


# --- mcp_stdio ---------------------------------------------------------------------------------


class _McpServer:
    """An MCP server (argv, no shell) started as `identity` for a request, with the
    conversation over its stdio and its stderr kept per exchange."""

    def __init__(
        self, request: dict[str, Any], identity: tuple[int, int] | None, emit: Emit | None
    ) -> None:
        argv = [str(arg) for arg in request["argv"]]
        if not argv or not argv[0]:
            raise OSError(errno.EINVAL, "an MCP server needs a program")
        limit = int(request.get("output_limit_bytes") or 1 << 20)
        self._stderr_limit = max(1, limit // 16)
        self.stderr = OutputSink(self._stderr_limit)
        ((in_r, in_w),) = spawn.command_pipes(identity, 1)
        command = ["bash", "--noprofile", "--norc", "-c", _EXEC_COMMAND, argv[0], *argv]
        try:
            self._run = _start(command, request, identity, stdin=in_r, separate_stderr=True)
        except OSError:
            os.close(in_w)
            raise
        finally:
            os.close(in_r)
        os.close(self._run.cwd_r)
        assert self._run.err_r is not None
        self._in_w = in_w
        self.conversation = mcp_stdio.Conversation(
            in_w, self._run.out_r, time.monotonic(), limit, (self._run.err_r, self._keep_stderr)
        )
        if emit is not None:
            self.conversation.on_progress = lambda line: emit(
                {"type": "progress", "output": line[:MAX_PROGRESS_BYTES]}
            )

    def _keep_stderr(self, data: bytes) -> None:
        self.stderr.add(data)

    def take_stderr(self) -> str:
        """What the server wrote on stderr since the last time (head and tail)."""
        text, _ = self.stderr.render()
        self.stderr = OutputSink(self._stderr_limit)
        return text

    def close(self) -> None:
        os.close(self._in_w)
        _kill_group(self._run.proc.pid)
        self._run.proc.wait(timeout=5)
        assert self._run.err_r is not None
        for fd in (self._run.out_r, self._run.err_r):
            os.close(fd)


def _mcp_answer(
    server: _McpServer, timeout_s: float, asked: Callable[[], dict[str, Any]]
) -> dict[str, Any]:
    """One exchange within `timeout_s`: its answer as the result's output, or what failed
    (`session_open`: the server is still there and in step)."""
    started = time.monotonic()
    server.conversation.set_deadline(started + timeout_s)
    try:
        answer = {
            "exit_code": 0,
            "output": wire.dumps(asked(), ascii_only=True),
            "session_open": True,
        }
        if server.conversation.tools_changed:  # the server's tools changed: read them again
            server.conversation.tools_changed = False
            listing = mcp_stdio.ask(server.conversation, "tools/list", {})
            answer["listing"] = wire.dumps(listing, ascii_only=True)
    except mcp_stdio.McpRefused as exc:
        answer = {"exit_code": -1, "error": str(exc), "session_open": True}
    except mcp_stdio.McpStdioError as exc:
        timed_out = time.monotonic() >= started + timeout_s
        answer = {"exit_code": -1, "error": str(exc), "timed_out": timed_out}
    duration_ms = int((time.monotonic() - started) * 1000)
    return {**answer, "stderr": server.take_stderr(), "duration_ms": duration_ms}


def _start_mcp(
    request: dict[str, Any], identity: tuple[int, int] | None, emit: Emit | None
) -> _McpServer | dict[str, Any]:
    try:
        return _McpServer(request, identity, emit)
    except OSError as exc:
        return {"exit_code": -1, "error": f"cannot start {request['argv'][0]}: {exc.strerror}"}


def run_mcp_stdio(
    request: dict[str, Any], identity: tuple[int, int] | None, emit: Emit | None = None
) -> dict[str, Any]:
    """Start an MCP server and have one exchange with it over its stdio (see mcp_stdio.py);
    its answer, as JSON, is the result's output."""
    server = _start_mcp(request, identity, emit)
    if isinstance(server, dict):
        return server
    method, params = str(request["method"]), request.get("params") or {}
    try:
        answer = _mcp_answer(
            server,
            int(request["timeout_ms"]) / 1000.0,
            lambda: mcp_stdio.exchange(server.conversation, method, params),
        )
    finally:
        server.close()
    answer.pop("session_open", None)
    return answer


def run_mcp_session(
    request: dict[str, Any], identity: tuple[int, int] | None, emit: Emit | None = None
) -> dict[str, Any]:
    """Start an MCP server for a session: initialize it (the first result), then answer
    `mcp_call` requests one by one, each with its own result, until the host goes away or
    the server fails (the last result, without `session_open`)."""
    server = _start_mcp(request, identity, emit)
    if isinstance(server, dict):
        return server

    def initialize() -> dict[str, Any]:
        mcp_stdio.initialize(server.conversation)
        return {}

    try:
        answer = _mcp_answer(server, int(request["timeout_ms"]) / 1000.0, initialize)
        answer["output"] = ""
        while answer.get("session_open"):
            write_message(1, {"type": "result", "v": PROTOCOL_VERSION, **answer})
            try:
                call = read_request(0, None)
            except (RequestError, ValueError) as exc:
                return {"exit_code": -1, "error": f"bad request: {exc}"}
            if call is None:
                return {"exit_code": 0}
            mismatch = workspace_mismatch(call, identity)
            if mismatch:
                return {"exit_code": -1, "error": mismatch, "mounts_changed": True}
            if call.get("kind") != "mcp_call":
                return {"exit_code": -1, "error": "a server's session takes mcp_call only"}
            answer = _mcp_answer(server, int(call["timeout_ms"]) / 1000.0, _asking(server, call))
        return answer
    finally:
        server.close()


def _asking(server: _McpServer, call: dict[str, Any]) -> Callable[[], dict[str, Any]]:
    """The exchange an `mcp_call` request asks for."""
    method, params = str(call.get("method")), call.get("params") or {}
    return lambda: mcp_stdio.ask(server.conversation, method, params)


# --- write_file --------------------------------------------------------------------------------

_KEPT_READ_ONLY = (
    "part of the workspace's repository, which is kept read-only (its .git, hooks and the files "
    "its configuration names; the policy's sandbox.git): leave such changes to the user"
)
_ERRNO_ADVICE = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "the workspace's disk budget is used up (disk quota exceeded); delete files "
    "that are not needed, or write less",
    errno.EACCES: "permission denied (the sandbox's identity may not write there)",
    errno.EPERM: "operation not permitted",
    errno.EROFS: f"read-only file system: it is outside the workspace, or {_KEPT_READ_ONLY}",
    errno.EBUSY: f"it is held in place (a mount point): {_KEPT_READ_ONLY}",
    errno.EFBIG: "file too large for the sandbox's file-size limit",
    errno.EISDIR: "it is a directory, not a file",
    errno.ENOTDIR: "a parent of it is not a directory",
    errno.ENAMETOOLONG: "the file name is too long",
}


#: Larger than any file the daemon reads to change (32 MiB): one that is, it cannot have read.
_MAX_HASHED_BYTES = 64 << 20


def _hashed(
    path: str, sha256: Callable[[], Any], dir_fd: int | None = None
) -> tuple[str, os.stat_result] | None:
    """sha256 of the regular file at `path` now, and what it is (its fstat); None when nothing
    is there. Opened without following a link or waiting (a FIFO), and read only while it can
    match what the daemon read: another tenant sharing the workspace swapped the file for a link
    to /dev/zero under a Write's check, which then read until its timeout (attacker round 112)."""
    try:
        fd = os.open(
            path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd
        )
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _Stale(
                "the file changed since it was read (it is a link now); Read it, retry"
            ) from exc
        raise
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise OSError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        if not stat.S_ISREG(info.st_mode) or info.st_size > _MAX_HASHED_BYTES:
            raise _Stale(
                "the file changed since it was read (it is no longer a regular file the daemon "
                "could have read); Read it, retry"
            )
        digest = sha256()
        left = info.st_size + 1  # one byte past its size: a file growing meanwhile changed
        while left > 0 and (block := handle.read(min(_CHUNK, left))):
            digest.update(block)
            left -= len(block)
        if left <= 0:
            raise _Stale("the file changed since it was read (it is growing); Read it, retry")
    return str(digest.hexdigest()), info


def write_file(
    request: dict[str, Any], identity: tuple[int, int] | None, emit: Emit | None = None
) -> dict[str, Any]:
    """Replace or create a file atomically, as `identity`, if it is still what the host last read.

    The runner starts in the workspace (the container's working directory); a path that resolves
    outside it, through a symbolic link, is refused rather than written to a place that vanishes
    with the container (its /tmp) or fails obscurely.
    """
    # A Write's alone (see the imports above); imported while the runner is still root: the
    # command's identity may not read the interpreter's files (on a host, in tests).
    import hashlib

    if identity is not None:
        confine.become(identity)  # for good: this container runs nothing else
    path = str(request["path"])
    content, expected = (
        request.get(ATTACHED, request.get("content")),
        request.get("expected_sha256"),
    )
    if not isinstance(content, str | bytes) or not (expected is None or isinstance(expected, str)):
        raise TypeError("content must be a string and expected_sha256 a string or null")
    data = content if isinstance(content, bytes) else content.encode("utf-8")
    if not os.path.isabs(path):
        return {"exit_code": 1, "error": "the path is not absolute; give the full path"}
    # The daemon sends the path its links resolved to when the policy judged it: written there
    # and nowhere else. A link found on the way now was made since, and is never followed
    # (attacker round 113 made one between the judgement and the write, and wrote a file the
    # policy asks a person about).
    target = os.path.normpath(path)
    workspace = os.getcwd()
    if target == workspace:
        return {"exit_code": 1, "error": _ERRNO_ADVICE[errno.EISDIR]}
    if not target.startswith(workspace.rstrip("/") + "/"):
        return {
            "exit_code": 1,
            "error": f"{target} is outside the workspace {workspace}; only files inside the "
            "workspace can be written",
        }
    try:
        parent, name = _parent_beneath(workspace, target)
        try:
            in_place = _bound(_in_place, workspace, target, parent)
            _replace_checked(
                parent, name, data, expected and expected.lower(), hashlib.sha256, in_place
            )
        finally:
            os.close(parent)
    except _Stale as exc:
        return {"exit_code": 1, "error": str(exc)}
    except OSError as exc:
        return {
            "exit_code": 1,
            "error": _ERRNO_ADVICE.get(exc.errno or 0, exc.strerror or str(exc)),
        }
    return {"exit_code": 0}


class _Stale(Exception):
    pass


_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _parent_beneath(workspace: str, target: str, *, make: bool = True) -> tuple[int, str]:
    """The folder holding `target`, opened from the workspace one name at a time without
    following a link (missing folders are made, with `make`), and the file's name in it."""
    *folders, name = os.path.relpath(target, workspace).split("/")
    fd = os.open(workspace, _FOLDER_FLAGS)
    try:
        for folder in folders:
            try:
                if make:
                    os.mkdir(folder, 0o777, dir_fd=fd)
            except FileExistsError:
                pass
            try:
                child = os.open(folder, _FOLDER_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno == errno.ELOOP or _is_link(folder, fd):
                    raise _Stale(
                        f"the path changed since it was checked ({folder} is a link now); Read "
                        "it, retry"
                    ) from exc
                raise
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd, name


def _in_place(workspace: str, target: str, parent: int) -> bool:
    """Whether `target`'s folder, walked to again from the workspace, is still the folder open
    at `parent`: one renamed meanwhile (another tenant's, attacker round 114) took the file
    written in it somewhere the policy never judged."""
    try:
        again, _ = _parent_beneath(workspace, target, make=False)
    except (OSError, _Stale):
        return False
    try:
        now, then = os.fstat(again), os.fstat(parent)
    finally:
        os.close(again)
    return (now.st_dev, now.st_ino) == (then.st_dev, then.st_ino)


def _bound(function: Callable[..., bool], *args: Any) -> Callable[[], bool]:
    """functools.partial without importing functools (1 ms of every container's CPU)."""
    return lambda: function(*args)


def _is_link(name: str, folder: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _replace_checked(
    parent: int,
    name: str,
    data: bytes,
    expected: str | None,
    sha256: Callable[[], Any],
    in_place: Callable[[], bool] = lambda: True,
) -> None:
    """Replace `name` in the folder open at `parent` by a file holding `data`, if what is there
    is still a file with the `expected` hash (None: nothing may be there), that very file (the
    one hashed is the one replaced), and the folder is still where it was judged (`in_place`,
    before and after the rename: after it, a moved folder's file is put back as it was)."""
    tmp = _side_name("tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, 0o600, dir_fd=parent)
    ours_at_tmp = True  # false once the name `tmp` holds something that is not ours to remove
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
            # Checked as late as possible, and checked again once the file is out of the way.
            found = _hashed(name, sha256, parent)
            _check_expected(found, expected)
            os.fchmod(fd, _mode_for(found))
            ours = os.fstat(fd)
        finally:
            os.close(fd)
        if not in_place():
            raise _Stale(_MOVED)
        if found is None:
            _create(tmp, name, parent)
            ours_at_tmp = False  # renamed: nothing is left at `tmp`
            if not _is(name, parent, ours):
                raise _Stale(_NOT_OURS)  # what was put there is not ours to remove
            if not in_place():
                _remove_if(name, parent, ours)
                raise _Stale(_MOVED)
        elif _renameat2(parent, tmp, name, _RENAME_EXCHANGE):
            ours_at_tmp = False  # `tmp` names the file that was at `name`
            why = "" if _is(name, parent, ours) else _NOT_OURS
            why = why or _not_as_read(tmp, parent, found, sha256)
            why = why or ("" if in_place() else _MOVED)
            if why:
                _exchange_back(tmp, name, parent)
                ours_at_tmp = _is(tmp, parent, ours)
                raise _Stale(why)
            # The replaced file, checked: the one that was read. Written all the same when it
            # cannot go: the old content stays under a side name.
            _unlink_quietly(tmp, parent)
        else:
            ours_at_tmp = False  # from here on, `_replace_by_name` removes it when it must
            _replace_by_name(tmp, name, parent, (found, ours), sha256, in_place)
    except BaseException:
        if ours_at_tmp:
            _unlink_quietly(tmp, parent)
        raise
    try:
        os.fsync(parent)
    except OSError:
        pass  # some file systems refuse fsync on directories; the rename is done


_MOVED = (
    "the file's folder was moved or replaced while it was written, so it was not written where "
    "it was checked; Read it, retry"
)
_SWAPPED = "the file changed since it was read (another file was put at its name); Read it, retry"
_NOT_OURS = (
    "its new content was replaced before it was put in place (another process put a file at "
    "the temporary name), so the file was not written; Read it, retry"
)
_WRITTEN_TO = (
    "the file changed since it was read (it was written to while this Write ran); Read it again, "
    "then retry"
)
_NOT_PUT_BACK = (
    "the file changed while it was written, and what was at its name could not be put back (it "
    "was removed meanwhile): the file may hold the content this Write sent, or another's. Read "
    "it to check"
)


def _side_name(kind: str) -> str:
    """A name beside the file for its new content or its old one: short, so that a file whose
    name is as long as the filesystem allows still gets one (attacker round 115)."""
    return f".tooljail-{os.urandom(6).hex()}.{kind}"


def _not_as_read(
    old: str, parent: int, found: tuple[str, os.stat_result], sha256: Callable[[], Any]
) -> str:
    """Why the file a rename took out of the way (now named `old`) is not the one checked with
    the content checked; "" when it is. Hashed again: what another process wrote into that very
    file after the check (same inode) would otherwise be lost unread (attacker round 115)."""
    try:
        again = _hashed(old, sha256, parent)
    except (_Stale, OSError):
        return _SWAPPED
    if again is None or not _same_file(again[1], found[1]):
        return _SWAPPED
    return "" if again[0] == found[0] else _WRITTEN_TO


def _exchange_back(tmp: str, name: str, parent: int) -> None:
    """Put back what an exchange took from `name` (now at `tmp`); when that is gone, the new
    content stays and the call says so."""
    try:
        if _renameat2(parent, tmp, name, _RENAME_EXCHANGE):
            return
    except OSError:
        pass
    raise _Stale(_NOT_PUT_BACK)


#: renameat2 flags (linux/fs.h).
_RENAME_NOREPLACE, _RENAME_EXCHANGE = 1, 2


def _check_expected(found: tuple[str, os.stat_result] | None, expected: str | None) -> None:
    if found is None and expected is not None:
        raise _Stale("the file changed since it was read (it was deleted); Read it, retry")
    if found is not None and expected is None:
        raise _Stale("the file changed since it was read (it exists now); Read it, retry")
    if found is not None and found[0] != expected:
        raise _Stale("the file changed since it was read; Read it again, then retry")


def _mode_for(found: tuple[str, os.stat_result] | None) -> int:
    """The replaced file's permissions, without setuid, setgid and sticky bits (the kernel drops
    the first two when a file is written to, and a file swapped in at the name must not lend
    them: attacker round 114) and never more open to others than the umask allows (round 115:
    a file swapped in with 0777 lent that); a new file's from the umask."""
    umask = os.umask(0)
    os.umask(umask)
    if found is not None:
        return found[1].st_mode & 0o777 & ~(umask & 0o007)
    return 0o666 & ~umask


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _renameat2(parent: int, old: str, new: str, flags: int) -> bool:
    """renameat2 within the folder open at `parent`; False when this kernel or filesystem has
    no such rename (callers then fall back to plain renames). ctypes is already loaded: the
    confinement filter needs it."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    call = getattr(libc, "renameat2", None)
    if call is None:
        return False
    if call(parent, os.fsencode(old), parent, os.fsencode(new), flags) == 0:
        return True
    error = ctypes.get_errno()
    if error in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(error, os.strerror(error), new)


def _create(tmp: str, name: str, parent: int) -> None:
    """`tmp` renamed to `name` only if nothing is at `name`: a file made there meanwhile is
    never replaced."""
    try:
        if _renameat2(parent, tmp, name, _RENAME_NOREPLACE):
            return
        os.link(tmp, name, src_dir_fd=parent, dst_dir_fd=parent, follow_symlinks=False)
    except FileExistsError as exc:
        raise _Stale("the file changed since it was read (it exists now); Read it, retry") from exc
    os.unlink(tmp, dir_fd=parent)


def _is(name: str, parent: int, file: os.stat_result) -> bool:
    """Whether `name` in the folder open at `parent` is `file` now."""
    try:
        return _same_file(os.stat(name, dir_fd=parent, follow_symlinks=False), file)
    except OSError:
        return False


def _remove_if(name: str, parent: int, ours: os.stat_result) -> None:
    """Undo a file this Write created in a moved folder, unless something else is there now."""
    if _is(name, parent, ours):
        _unlink_quietly(name, parent)


def _unlink_quietly(name: str, parent: int) -> None:
    """Remove `name` from the folder open at `parent`, if it can be (a leftover otherwise)."""
    try:
        os.unlink(name, dir_fd=parent)
    except OSError:
        pass


def _replace_by_name(
    tmp: str,
    name: str,
    parent: int,
    files: tuple[tuple[str, os.stat_result], os.stat_result],
    sha256: Callable[[], Any],
    in_place: Callable[[], bool],
) -> None:
    """Where the filesystem cannot exchange two names: a second name for the file about to be
    replaced, checked to be the file hashed, then a plain rename, then that file hashed again.
    A file swapped in between the link and the rename is replaced unseen (a window of two
    system calls), and without a second name nothing is checked after the rename. `files`:
    the file hashed (its hash and stat), and the new one's stat."""
    found, ours = files
    kept = _side_name("old")
    try:
        os.link(name, kept, src_dir_fd=parent, dst_dir_fd=parent, follow_symlinks=False)
    except OSError:
        kept = ""  # no second name on this filesystem: a moved folder keeps the new content
    try:
        try:
            if kept and not _is(kept, parent, found[1]):
                raise _Stale(_SWAPPED)
            os.replace(tmp, name, src_dir_fd=parent, dst_dir_fd=parent)
        except BaseException:
            _unlink_quietly(tmp, parent)  # still ours: it was not renamed
            raise
        why = "" if _is(name, parent, ours) else _NOT_OURS
        why = why or (_not_as_read(kept, parent, found, sha256) if kept else "")
        why = why or ("" if in_place() else _MOVED)
        if why:
            if kept:
                put_back, kept = kept, ""  # kept whatever happens: it may be the only copy
                try:
                    os.replace(put_back, name, src_dir_fd=parent, dst_dir_fd=parent)
                except OSError:
                    why = _NOT_PUT_BACK
            raise _Stale(why)
    finally:
        if kept:
            _unlink_quietly(kept, parent)  # else a second name of the old content stays behind


# --- main --------------------------------------------------------------------------------------

_HANDLERS: dict[
    str, Callable[[dict[str, Any], tuple[int, int] | None, Emit | None], dict[str, Any]]
] = {
    "bash": run_bash,
    "exec": run_exec,
    "mcp_stdio": run_mcp_stdio,
    "mcp_session": run_mcp_session,
    "write_file": write_file,
}


def workspace_mismatch(request: dict[str, Any], identity: tuple[int, int] | None) -> str:
    """Why the workspace mounted here is not the one the request expects; "" when it is. What
    lies inside it is looked at as `identity` (`pins_mismatch`)."""
    workspace, expected = request.get("workspace"), request.get("workspace_id")
    if not isinstance(workspace, str) or not isinstance(expected, list) or len(expected) != 2:
        return "the request does not name the workspace it expects"
    try:
        info = os.lstat(workspace)
    except OSError as exc:
        return f"the workspace {workspace} is not mounted here ({exc.strerror})"
    if [info.st_dev, info.st_ino] != expected:
        return (
            f"the directory mounted at {workspace} is not the session's workspace (it was moved "
            "or replaced after the session was opened); nothing ran"
        )
    return pins_mismatch(workspace, request.get("pins"), identity)


def pins_mismatch(workspace: str, pins: object, identity: tuple[int, int] | None = None) -> str:
    """Why the pinned paths of the workspace's repository are not what the request expects ("" when
    they are). Each must be the object the daemon found (the engine follows a symbolic link
    swapped in for a mount's source), a mount point (so that it cannot be renamed or replaced
    here), and, if read-only, read-only (only the mount says so: the workspace's own mount shows
    the same object, writable). The paths are looked at as `identity`, the command's: the runner
    is root without the capabilities that pass file permissions, and a fresh workspace is the
    sandbox account's alone (mode 0750)."""
    if not isinstance(pins, list):
        return "the request does not name the repository's pinned paths"
    mount_points: set[str] | None = None
    for pin in pins:
        if not (
            isinstance(pin, dict)
            and isinstance(pin.get("path"), str)
            and isinstance(pin.get("identity"), list)
            and isinstance(pin.get("read_only"), bool)
            and pin["path"].startswith(workspace.rstrip("/") + "/")
        ):
            return "the request names the repository's pinned paths wrongly"
        path = pin["path"]
        try:
            with _LookingAs(identity):
                info = os.lstat(path)
                read_only = bool(os.statvfs(path).f_flag & os.ST_RDONLY)
        except OSError as exc:
            return f"{path} of the repository is not mounted here ({exc.strerror}); nothing ran"
        if [info.st_dev, info.st_ino] != pin["identity"]:
            return (
                f"{path} mounted here is not the repository's (it was moved or replaced after "
                "the call was decided); nothing ran"
            )
        if pin["read_only"] and not read_only:
            return f"{path} of the repository is not read-only here; nothing ran"
        if mount_points is None:
            mount_points = _mount_points()
        if path not in mount_points:
            return f"{path} of the repository is not mounted over itself here; nothing ran"
    return ""


class _LookingAs:
    """The runner's effective ids switched to `identity` for a look at the workspace, then back
    (root keeps its permitted capabilities while only its effective id changes). A class, not a
    contextlib generator: contextlib costs every container 3 ms of CPU to import."""

    def __init__(self, identity: tuple[int, int] | None) -> None:
        self._identity = identity if os.geteuid() == 0 else None

    def __enter__(self) -> None:
        if self._identity is not None:
            os.setegid(self._identity[1])
            try:
                os.seteuid(self._identity[0])
            except BaseException:
                os.setegid(0)
                raise

    def __exit__(self, *_: object) -> None:
        if self._identity is not None:
            os.seteuid(0)
            os.setegid(0)


def _mount_points() -> set[str]:
    """Where something is mounted in this container (mountinfo escapes blanks and backslashes
    as octal)."""
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as table:
        return {_octal_unescaped(line.split(" ")[4]) for line in table if line.count(" ") >= 4}


def _octal_unescaped(field: str) -> str:
    """A mountinfo field with each `\\NNN` (three octal digits) back to its character."""
    parts = field.split("\\")
    out = [parts[0]]
    for part in parts[1:]:
        code = part[:3]
        if len(code) == 3 and all(digit in "01234567" for digit in code):
            out.append(chr(int(code, 8)) + part[3:])
        else:
            out.append("\\" + part)
    return "".join(out)


def handle(
    request: dict[str, Any], identity: tuple[int, int] | None, emit: Emit | None = None
) -> dict[str, Any]:
    """Carry out one request as `identity` and build its result message (without the type);
    progress messages, if any, go to `emit` on the way."""
    kind = request.get("kind")
    handler = _HANDLERS.get(str(kind))
    if handler is None:
        return {"exit_code": -1, "error": f"unknown request kind {kind!r}"}
    mismatch = workspace_mismatch(request, identity)
    if mismatch:
        return {"exit_code": -1, "error": mismatch, "mounts_changed": True}
    try:
        return handler(request, identity, emit)
    except (KeyError, TypeError, ValueError) as exc:
        return {"exit_code": -1, "error": f"malformed {kind} request: {exc!r}"}


def _identity(run_as: str | None) -> tuple[int, int] | None:
    """Who runs the command: `--run-as`, required when the runner is root; None: the runner."""
    if run_as is not None:
        identity: tuple[int, int] = confine.parse_identity(run_as)
        if os.geteuid() != 0 and identity != (os.geteuid(), os.getegid()):
            raise confine.ConfinementError("--run-as needs a runner that is root")
        return identity
    if os.geteuid() == 0:
        raise confine.ConfinementError("refusing to run commands as root: give --run-as")
    return None


#: What the warm-up runs: nothing, through every step a request's command goes through.
WARM_UP_COMMAND = ":"


def warm_up(identity: tuple[int, int] | None) -> None:
    """Run `:` once as a request's command runs (as `identity`, through bash_env.sh, its output
    read), unless a request is already waiting: the first bash of a fresh container costs about
    a millisecond more (its files, the loader's and the runner's own paths are cold; measured in
    the container), and a pooled container can pay that before it is taken. Nothing of the
    model's runs here, and nothing is left (the group is killed and reaped as after any
    command)."""
    if select.select([0], [], [], 0)[0]:
        return  # a cold start: the request is here, and it must not wait
    cwd = os.getcwd()
    request = {"command": WARM_UP_COMMAND, "cwd": cwd, "workspace": cwd, "timeout_ms": 5000}
    run_bash({**request, "output_limit_bytes": 1024}, identity)


def _progress_writer() -> Emit:
    """Writes progress messages to stdout; once the host is gone it stops trying, so the command
    still ends (and is cleaned up) normally instead of the runner dying halfway."""
    gone = False

    def emit(message: dict[str, Any]) -> None:
        nonlocal gone
        if gone:
            return
        try:
            write_message(1, message)
        except OSError:
            gone = True

    return emit


class Options:
    """The runner's command line (see sandbox/hardening.py, which writes it)."""

    def __init__(self) -> None:
        self.idle_exit_s: float | None = None
        """Exit quietly when no request arrived within this many seconds."""
        self.hang_up_wait_s = HANG_UP_WAIT_S
        """After answering, wait at most this long for the host to close stdin."""
        self.end_leftovers = False
        """Before answering, kill every other process of the container (its own PID namespace)
        but its init: only where the runner is the container's root."""
        self.run_as: str | None = None
        """uid:gid the command runs as (not root)."""
        self.egress_socket: str | None = None
        """The daemon's egress proxy (a Unix socket): start the loopback forwarder to it."""
        self.umask: int | None = None
        """The umask commands (and the files the runner writes for them) start with."""


def parse_options(argv: list[str]) -> Options:
    """`--name value` (or `--name=value`) for each option, `--end-leftovers` alone; ValueError
    naming what is wrong (argparse would cost every container 3 ms of CPU to import)."""
    options = Options()
    rest = list(argv)
    while rest:
        name, has_value, value = rest.pop(0).partition("=")
        if name == "--end-leftovers" and not has_value:
            options.end_leftovers = True
            continue
        if name not in _VALUED_OPTIONS:
            raise ValueError(f"unknown option {name!r}")
        if not has_value:
            if not rest:
                raise ValueError(f"{name} needs a value")
            value = rest.pop(0)
        attribute, read = _VALUED_OPTIONS[name]
        setattr(options, attribute, read(value))
    return options


def _octal_mode(text: str) -> int:
    mode = int(text, 8)
    if not 0 <= mode <= 0o777:
        raise ValueError(f"not a umask: {text!r}")
    return mode


#: The options that take a value: the attribute of Options each sets, and how it is read.
_VALUED_OPTIONS: dict[str, tuple[str, Callable[[str], object]]] = {
    "--idle-exit-s": ("idle_exit_s", float),
    "--hang-up-wait-s": ("hang_up_wait_s", float),
    "--run-as": ("run_as", str),
    "--egress-socket": ("egress_socket", str),
    "--umask": ("umask", _octal_mode),
}


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_options(sys.argv[1:] if argv is None else argv)
    except ValueError as exc:
        sys.stderr.write(f"runner.py: {exc}\n")
        return 2
    spawn.ignore_interrupts()
    try:
        identity = _identity(args.run_as)
        confine.forbid_inspection()
        confine.install_filter()
    except (confine.ConfinementError, ValueError, OSError) as exc:
        write_message(1, {"type": "result", "exit_code": -1, "error": f"not confined: {exc}"})
        return 3
    if args.umask is not None:
        os.umask(args.umask)
    if args.egress_socket:
        try:
            _start_forwarder(args.egress_socket)
        except OSError as exc:
            write_message(1, {"type": "result", "exit_code": -1, "error": f"no egress: {exc}"})
            return 3
    warm_up(identity)
    try:
        request = read_request(0, args.idle_exit_s)
    except (RequestError, ValueError) as exc:
        write_message(1, {"type": "result", "exit_code": -1, "error": f"bad request: {exc}"})
        return 2
    if request is None:
        return 0
    received = time.monotonic()
    result = handle(request, identity, _progress_writer())
    if args.end_leftovers and (left := end_leftovers(LEFTOVERS_WAIT_S)):
        result["leftovers"] = left
    # The host's clock: containers share its monotonic clock, so the daemon can place these
    # between its own marks (sandbox/timeline.py).
    marks = [["received", received], *result.pop("timeline", []), ["answered", time.monotonic()]]
    write_message(1, {"type": "result", "v": PROTOCOL_VERSION, **result, "timeline": marks})
    wait_for_hang_up(0, args.hang_up_wait_s)
    return 0


def _start_forwarder(socket_path: str) -> None:
    try:  # forward.py brings asyncio (50 ms of CPU): egress containers alone import it
        import forward  # type: ignore[import-not-found,unused-ignore]
    except ImportError:  # on the host, as part of the sandbox package (tests)
        from sandbox.runner import forward
    forward.start(socket_path)


LEFTOVERS_WAIT_S = 60.0
"""How long the runner waits for what it killed to be gone before it answers anyway."""


def end_leftovers(wait_s: float) -> int:
    """Kill what the call left running (processes that left its process group, the egress
    forwarder) and wait until they are gone, so that nothing of the call writes into the
    workspace once the daemon has said it is over; how many were still there after `wait_s`
    (0: none).

    Killed is not gone: attacker round 60 saw a `setsid -f` loop go on appending for 50 ms after
    the answer, until the container was torn down; round 94 had killed processes stuck in the
    kernel (a truncate of a file of many extents on ext4 holds its inode for seconds, and a
    rename waiting on it holds the directory) rename a repository into place as `.git` 3.3 s
    after the answer, after the daemon had looked for one. A process is gone once /proc no
    longer lists it: it has left every system call and been reaped (by the container's init,
    or here for the runner's own children).

    kill(-1) from the runner, root with CAP_KILL, reaches every process of the container's PID
    namespace but its init and the runner itself; never use it where that namespace is the
    host's. It is sent again while waiting, for a child forked as the first one went out."""
    deadline = time.monotonic() + wait_s
    pause = 0.0002
    while True:
        try:
            os.kill(-1, spawn.SIGKILL)
        except OSError:
            pass  # ESRCH: nothing left to signal
        _reap_own_children()
        left = _other_processes()
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(pause)
        pause = min(pause * 2, 0.02)


def _reap_own_children() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _other_processes() -> int:
    """Processes of this PID namespace but its init and the runner (zombies included: one
    listed here may not have been reaped yet, which takes the init a moment)."""
    own = os.getpid()
    return sum(1 for name in os.listdir("/proc") if name.isdigit() and int(name) not in (1, own))


def wait_for_hang_up(stdin: int, timeout_s: float) -> None:
    """Return once the host closed `stdin` (or after `timeout_s`): exiting as soon as the answer
    is written tears the container down while the answer is still on its way, and on a 2-core
    machine that teardown delayed the answer by 1-7 ms (2.7 ms mean, against 0.7 ms waiting)."""
    deadline = time.monotonic() + timeout_s
    while (remaining := deadline - time.monotonic()) > 0:
        try:
            if not select.select([stdin], [], [], remaining)[0] or not os.read(stdin, 65536):
                return
        except (OSError, ValueError):  # no stdin at all: nobody to wait for
            return


if __name__ == "__main__":
    sys.exit(main())
