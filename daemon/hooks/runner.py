"""Runs one hook process on the host and collects what it said.

The hook runs as the daemon's user, never in a sandbox: it is operator code, trusted like the
daemon's config. The workspace is not: the model writes it. So the hook starts in a neutral
working directory (`/`), not the workspace, where linters would load configuration and plugins
the model planted; it gets a clean environment, the workspace only as data (the `cwd` field of
its input and two variables), its input on stdin, and its own process group, so a timeout or a
cancellation kills everything it started.
Output is read while the process runs (a chatty hook never blocks on a full pipe) and only the
first `OUTPUT_CAP_BYTES` of each stream are kept.
"""

from __future__ import annotations

import logging
import os
import pwd
import time
from dataclasses import dataclass
from pathlib import Path

from daemon.hooks.config import HookSpec
from daemon.host.child import run_child

__all__ = ["OUTPUT_CAP_BYTES", "HookProcess", "hook_environment", "run_hook"]

log = logging.getLogger(__name__)

OUTPUT_CAP_BYTES = 64 * 1024
"""Bytes kept of each of stdout and stderr; the rest is read and counted, not stored."""
REDACTING_CAP_BYTES = 16 << 20
"""The same for a redacting hook, whose answer is a whole output."""

_SHELL = "/bin/sh"
NEUTRAL_CWD = Path("/")
"""Where hooks start: nothing the model wrote is there."""

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
    cap: int = OUTPUT_CAP_BYTES
    """Bytes kept of each stream."""

    @property
    def stdout_truncated(self) -> bool:
        """stdout was longer than the cap."""
        return self.stdout_bytes > self.cap

    @property
    def stderr_truncated(self) -> bool:
        """stderr was longer than the cap."""
        return self.stderr_bytes > self.cap


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


async def run_hook(spec: HookSpec, stdin_data: bytes, workspace: Path) -> HookProcess:
    """Run `spec` once with `stdin_data` on its stdin, for a call in `workspace`.

    Never raises for anything the hook does (a failure to start is reported in `start_error`);
    a cancellation kills the hook's process group and propagates.
    """
    started = time.monotonic()
    cap = REDACTING_CAP_BYTES if spec.redacts else OUTPUT_CAP_BYTES
    try:
        run = await run_child(
            _argv(spec),
            input_data=stdin_data,
            timeout_s=spec.timeout_s,
            output_cap=cap,
            cwd=NEUTRAL_CWD,
            env=hook_environment(spec, workspace),
        )
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
    exit_code = run.exit_code
    start_error = ""
    if isinstance(spec.command, str) and exit_code in _SHELL_CANNOT_RUN:
        start_error = f"the shell could not run the command (exit {exit_code})"
        if run.stderr.total:
            start_error += f": {run.stderr.text().strip()}"
    elif isinstance(spec.command, str) and exit_code is not None and 128 < exit_code <= 128 + 64:
        # The shell reports a child killed by signal N as 128+N: a crash, not an answer.
        exit_code = 128 - exit_code
    return HookProcess(
        exit_code=exit_code,
        stdout=run.stdout.text(),
        stderr=run.stderr.text(),
        stdout_bytes=run.stdout.total,
        stderr_bytes=run.stderr.total,
        timed_out=run.timed_out,
        start_error=start_error,
        duration_ms=int(run.duration_s * 1000),
        cap=cap,
    )
