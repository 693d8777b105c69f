"""Background shells: Bash commands that go on after the call that started them returned.

A background command runs in its own container like any Bash command (same hardening, the limits
and network its call was granted), only with a longer life: the policy's `background.timeout_ms`.
Its output goes into the shell's unread buffer (bounded: past `UNREAD_CAP_CHARS` the oldest is
dropped and counted), which BashOutput takes; KillShell cancels it, and a closed session takes its
shells with it. In every case the container goes with the command: nothing outlives its session.

How many may run is decided twice: the policy's grant per session (`background.shells`, 0 for
none) and the daemon's caps over all sessions (`max_total`) and per principal (`per_principal`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from daemon.errors import SandboxError, ToolError, ToolInputError
from daemon.tools.contract import BackgroundGrant, SandboxRunner
from sandbox.backend import BashRequest, SandboxLimits, SandboxResult

log = logging.getLogger(__name__)

UNREAD_CAP_CHARS = 256 * 1024
"""Output kept unread per shell; older output is dropped first (and counted)."""
FINISHED_KEPT = 16
"""Finished shells a session remembers for BashOutput (the oldest are forgotten)."""
FINISHED_KEPT_PER_OWNER = 32
"""The same over one principal's sessions."""
FINISHED_KEPT_TOTAL = 128
"""The same over all sessions: what finished shells hold is bounded for the daemon."""


class ShellState(StrEnum):
    """Where a background command is (BashOutput's `<status>`)."""

    RUNNING = "running"
    COMPLETED = "completed"
    """It exited on its own (any exit code)."""
    FAILED = "failed"
    """The sandbox could not run it, or it ran out of memory."""
    KILLED = "killed"
    """KillShell, its session closing or the daemon stopping ended it."""
    TIMED_OUT = "timed_out"
    """It ran for its whole lifetime and was killed."""


@dataclass
class BackgroundShell:
    """One background command of a session."""

    id: str
    command: str
    session_id: str
    owner: str
    timeout_ms: int
    tool_use_id: str = ""
    """The Bash call that started it (its audit records name it)."""
    started_at: float = field(default_factory=time.time)
    task: asyncio.Task[SandboxResult] | None = None
    result: SandboxResult | None = None
    """How the container's run ended (None while it runs)."""
    killed_by: str = ""
    """Who ended it early ("KillShell", "session closed", ...)."""
    background: bool = False
    """Listed and counted as a background command (a foreground one becomes one when moved)."""
    dropped_chars: int = 0
    """Output dropped unread since the last BashOutput, to stay within the buffer."""
    total_chars: int = 0
    _unread: deque[str] = field(default_factory=deque, init=False)
    _unread_chars: int = field(default=0, init=False)
    _ended: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    _begun: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    """Set when the command went to its container, or ended without getting there."""

    def add(self, chunk: str) -> None:
        """New output (called for each chunk while the command runs)."""
        self._unread.append(chunk)
        self._unread_chars += len(chunk)
        self.total_chars += len(chunk)
        self._trim()

    def _trim(self) -> None:
        """Drop the oldest unread output past the cap."""
        while self._unread_chars > UNREAD_CAP_CHARS:
            over = self._unread_chars - UNREAD_CAP_CHARS
            oldest = self._unread[0]
            if len(oldest) <= over:
                self._unread.popleft()
                cut = len(oldest)
            else:
                self._unread[0] = oldest[over:]
                cut = over
            self._unread_chars -= cut
            self.dropped_chars += cut

    def take(self) -> tuple[str, int]:
        """The output not read yet and how much was dropped before it; both are reset."""
        text = "".join(self._unread)
        dropped = self.dropped_chars
        self._unread.clear()
        self._unread_chars = 0
        self.dropped_chars = 0
        return text, dropped

    def put_back(self, text: str, dropped: int) -> None:
        """Undo a `take` whose reader failed: `text` is unread again, before newer output."""
        self._unread.appendleft(text)
        self._unread_chars += len(text)
        self.dropped_chars += dropped
        self._trim()

    @property
    def done(self) -> bool:
        return self._ended.is_set()

    async def wait(self, timeout_s: float) -> bool:
        """Wait for the command to end, at most `timeout_s`; whether it ended."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._ended.wait()
        return self.done

    def begin(self) -> None:
        """Its command went to its container: the command's own time runs from now."""
        self._begun.set()

    async def run_for(self, timeout_s: float) -> bool:
        """Wait for the command to end, at most `timeout_s` of its own time: however long its
        container took to start, the command gets all of it. Whether it ended."""
        await self._begun.wait()
        return await self.wait(timeout_s)

    @property
    def state(self) -> ShellState:
        result = self.result
        if not self.done or result is None:
            return ShellState.RUNNING
        if self.killed_by or result.cancelled:
            return ShellState.KILLED
        if result.timed_out:
            return ShellState.TIMED_OUT
        if result.error or result.oom_killed:
            return ShellState.FAILED
        return ShellState.COMPLETED

    def finish(self, result: SandboxResult) -> None:
        self.result = result
        self._begun.set()
        self._ended.set()


class BackgroundShells:
    """The daemon's background commands, by session.

    Args:
        max_total: Background commands running at once over all sessions.
        per_principal: Of those, how many one principal's sessions may run.
        max_timeout_ms: Ceiling on a background command's life, whatever the policy grants.
        on_end: Told (with a record for the audit log) when a background command ends.
    """

    def __init__(
        self,
        *,
        max_total: int,
        per_principal: int,
        max_timeout_ms: int,
        on_end: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self._max_total = max_total
        self._per_principal = per_principal
        self.max_timeout_ms = max_timeout_ms
        self._on_end = on_end
        self._shells: dict[str, dict[str, BackgroundShell]] = {}
        self._closed = False

    def running(self, *, session_id: str | None = None, owner: str | None = None) -> int:
        """Background commands running now (of one session, of one principal, or all)."""
        return sum(
            1
            for shells in self._shells.values()
            for shell in shells.values()
            if shell.background
            and not shell.done
            and (session_id is None or shell.session_id == session_id)
            and (owner is None or shell.owner == owner)
        )

    def room(self, session_id: str, owner: str, grant: BackgroundGrant) -> str:
        """Why one more background command may not start now ("" when it may)."""
        if self._closed:
            return "the daemon is shutting down"
        if grant.shells <= 0 or grant.timeout_ms <= 0:
            return "the policy does not allow background commands in this session"
        if self.running(session_id=session_id) >= grant.shells:
            return (
                f"this session already runs {grant.shells} background commands, as many as the "
                "policy allows; read them with BashOutput and stop one with KillShell first"
            )
        if self.running(owner=owner) >= self._per_principal:
            return (
                f"this principal's sessions already run {self._per_principal} background "
                "commands (the daemon's sandbox.background_per_principal); stop one with "
                "KillShell first"
            )
        if self.running() >= self._max_total:
            return (
                f"the daemon already runs {self._max_total} background commands for all its "
                "callers (sandbox.background_max); try again later or run the command in the "
                "foreground"
            )
        return ""

    def lifetime_ms(self, grant: BackgroundGrant) -> int:
        """How long a background command of this grant may run."""
        return max(1, min(grant.timeout_ms, self.max_timeout_ms))

    def launch(
        self,
        runner: SandboxRunner,
        request: BashRequest,
        limits: SandboxLimits,
        *,
        session_id: str,
        owner: str,
        tool_use_id: str = "",
        on_output: Callable[[str], None] | None = None,
        background: bool,
    ) -> BackgroundShell:
        """Start `request` in a container of its own; `background`: counted and listed as a
        background command at once (else only once `adopt`ed).

        The caller checked `room` first (for `background`); `on_output` also gets the output
        until the command becomes a background one."""
        if self._closed:
            raise ToolError("The daemon is shutting down; no command can start now.")
        shell = BackgroundShell(
            id=f"bash_{secrets.token_hex(4)}",
            command=request.command,
            session_id=session_id,
            owner=owner,
            timeout_ms=request.timeout_ms,
            tool_use_id=tool_use_id,
            background=background,
        )
        relay = _Relay(shell, on_output)
        shell.task = asyncio.create_task(_run(shell.id, runner, request, limits, relay))
        shell.task.add_done_callback(functools.partial(self._ended, shell))
        self._shells.setdefault(session_id, {})[shell.id] = shell
        self._forget_finished(session_id)
        return shell

    def adopt(self, shell: BackgroundShell, grant: BackgroundGrant) -> str:
        """Make a running foreground command a background one; "" when done, else why not."""
        refused = self.room(shell.session_id, shell.owner, grant)
        if not refused:
            shell.background = True
        return refused

    async def discard(self, shell: BackgroundShell, why: str) -> None:
        """End a command that was not moved to the background (its foreground call ended)."""
        await self._kill(shell, why)
        self._shells.get(shell.session_id, {}).pop(shell.id, None)

    def find(self, session_id: str, shell_id: str) -> BackgroundShell:
        """The session's background command `shell_id`.

        Raises:
            ToolInputError: No such command in this session (naming the ones there are).
        """
        shells = {
            key: shell
            for key, shell in self._shells.get(session_id, {}).items()
            if shell.background
        }
        found = shells.get(shell_id.strip())
        if found is not None:
            return found
        listed = ", ".join(f"{key} ({s.state.value})" for key, s in shells.items())
        known = (
            f"This session's background commands: {listed}."
            if listed
            else (
                "This session has no background commands; start one with Bash and "
                "run_in_background: true."
            )
        )
        raise ToolInputError(f"No background command with ID {shell_id!r} in this session. {known}")

    async def kill(self, session_id: str, shell_id: str) -> BackgroundShell:
        """End a session's background command (already ended ones are left as they are)."""
        shell = self.find(session_id, shell_id)
        if not shell.done:
            await self._kill(shell, "KillShell")
        return shell

    async def remove_session(self, session_id: str) -> int:
        """End the commands of a closed session; how many were running.

        Every command is told to stop before the first await, and stays counted until it has:
        a cancellation of this very call cannot leave one running unseen."""
        shells = self._shells.get(session_id, {})
        running = [shell for shell in shells.values() if not shell.done]
        for shell in running:
            _stop(shell, "session closed")
        await asyncio.gather(*(self._kill(shell, "session closed") for shell in running))
        if all(shell.done for shell in shells.values()):
            self._shells.pop(session_id, None)
        return len(running)

    async def close(self) -> None:
        """End every command (the daemon stops)."""
        self._closed = True
        for session_id in list(self._shells):
            await self.remove_session(session_id)

    async def _kill(self, shell: BackgroundShell, why: str) -> None:
        if shell.task is None or shell.done:
            return
        _stop(shell, why)
        with contextlib.suppress(asyncio.CancelledError):
            await shell.task
        await shell.wait(1.0)  # its done callback, should it not have run yet

    def _ended(self, shell: BackgroundShell, task: asyncio.Task[SandboxResult]) -> None:
        # A done callback, not a `finally`: a task cancelled before its first step never runs
        # any of its code.
        if task.cancelled():
            shell.finish(SandboxResult(exit_code=-1, cancelled=True))
        else:
            result = task.result()
            if shell.total_chars == 0 and result.output:
                # It ended before its first progress was due: the output came with the result.
                shell.add(result.output)
            if shell.background:
                # The output is in the buffer now: the result keeps only how the command ended.
                result = result.model_copy(update={"output": ""})
            # A foreground command's result is its call's answer, output and all.
            shell.finish(result)
        if shell.background and self._on_end is not None:
            self._on_end(_end_record(shell))
        self._forget_finished(shell.session_id)

    def _forget_finished(self, session_id: str) -> None:
        """Forget the oldest finished shells past the caps of their session, of their
        principal and in all."""
        shells = self._shells.get(session_id, {})
        finished = [key for key, shell in shells.items() if shell.done]
        for key in finished[: max(0, len(finished) - FINISHED_KEPT)]:
            del shells[key]
        owner = next(iter(shells.values())).owner if shells else ""
        every = sorted(
            (
                (shell.started_at, sid, key, shell.owner)
                for sid, mine in self._shells.items()
                for key, shell in mine.items()
                if shell.done
            ),
        )
        theirs = [entry for entry in every if entry[3] == owner]
        doomed = theirs[: max(0, len(theirs) - FINISHED_KEPT_PER_OWNER)]
        doomed += [e for e in every if e not in doomed][
            : max(0, len(every) - len(doomed) - FINISHED_KEPT_TOTAL)
        ]
        for _, sid, key, _ in doomed:
            self._shells.get(sid, {}).pop(key, None)


def _stop(shell: BackgroundShell, why: str) -> None:
    """Tell a running command to stop (at once: no await), recording who ended it."""
    if shell.task is None or shell.done:
        return
    shell.killed_by = shell.killed_by or why
    if not shell.task.cancelling():  # a second cancel would cut its clean-up short
        shell.task.cancel()


async def _run(
    shell_id: str,
    runner: SandboxRunner,
    request: BashRequest,
    limits: SandboxLimits,
    relay: _Relay,
) -> SandboxResult:
    try:
        return await runner.run(request, limits, relay, on_start=relay.shell.begin)
    except SandboxError as exc:
        return SandboxResult(exit_code=-1, error=f"the sandbox could not run it: {exc}")
    except Exception:
        log.exception("background command %s failed unexpectedly", shell_id)
        return SandboxResult(exit_code=-1, error="it failed with an internal error")


class _Relay:
    """Output of a command: into its shell's buffer, and to the foreground caller while one
    listens."""

    def __init__(self, shell: BackgroundShell, listener: Callable[[str], None] | None) -> None:
        self.shell = shell
        self.listener = listener

    def __call__(self, chunk: str) -> None:
        self.shell.add(chunk)
        if self.listener is not None and not self.shell.background:
            self.listener(chunk)


def _end_record(shell: BackgroundShell) -> dict[str, Any]:
    result = shell.result or SandboxResult(exit_code=-1)
    return {
        "time": time.time(),
        "shell_id": shell.id,
        "tool_use_id": shell.tool_use_id,
        "session": shell.session_id,
        "principal": shell.owner,
        "state": shell.state.value,
        "exit_code": result.exit_code,
        "killed_by": shell.killed_by,
        "sandbox_id": result.sandbox_id,
        "duration_ms": int((time.time() - shell.started_at) * 1000),
        "output_chars": shell.total_chars,
    }
