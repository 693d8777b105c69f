"""Running ripgrep for Grep: where it starts, how its output is collected, how searches running
side by side share the cores, and what its errors tell the model.

ripgrep starts in a directory opened and checked inside the workspace and searches relative
paths, so a symlink swapped in after the check cannot redirect it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from daemon.errors import ToolError
from daemon.host.child import Child
from daemon.host.confine import open_confined
from daemon.host.landlock import HELPER_NAME, NOT_CONFINED_EXIT, started_in
from daemon.host.pinned import PinnedDirectory

MAX_KEPT_CHARS = 4 * 1024 * 1024
"""Output kept in memory at most; beyond it lines are counted, not stored."""
MAX_STDERR_BYTES = 8192
"""ripgrep's error output kept for the message."""

# One line of ripgrep's --stats block ("12 matched lines", "40 files searched"...). Result lines
# never look like this: they start with the absolute path searched.
_STAT_LINE = re.compile(
    r"^(\d+)(?:\.\d+)? (matches|matched lines|files contained matches|files searched|"
    r"bytes printed|bytes searched|seconds spent searching|seconds)$"
)


def absolute(entry: str, shown_as: str) -> str:
    """A path ripgrep printed (it runs in the search root: "./...") made absolute again."""
    return shown_as + entry[1:] if entry.startswith("./") else entry


@dataclass
class Collector:
    """Keeps the lines of a window of ripgrep's output and counts all of them."""

    skip: int
    keep: int | None
    lines: list[str] = field(default_factory=list)
    total: int = 0
    chars: int = 0
    capped: bool = False
    read_stats: bool = False
    """ripgrep runs with --stats: take its block at the end out of the result lines."""
    stats: dict[str, int] = field(default_factory=dict)
    """The --stats figures by name ("files searched": 40, ...)."""
    progress: Callable[[int], None] | None = None
    """Gets the running total of result lines (throttled on its side)."""
    shown_as: str = ""
    """The absolute directory ripgrep's leading "." stands for (it runs in the search root)."""

    def feed(self, line: str) -> None:
        if self.read_stats and self._stat(line):
            return
        if self.shown_as:
            line = absolute(line, self.shown_as)
        index = self.total
        self.total += 1
        if self.progress is not None:
            self.progress(self.total)
        if index < self.skip or (self.keep is not None and len(self.lines) >= self.keep):
            return
        if self.capped or self.chars + len(line) > MAX_KEPT_CHARS:
            self.capped = True
            return
        self.chars += len(line) + 1
        self.lines.append(line)

    def _stat(self, line: str) -> bool:
        if not line:
            return True  # the blank line before the stats block
        match = _STAT_LINE.match(line)
        if match is None:
            return False
        self.stats[match[2]] = int(match[1])
        return True


async def _read_capped(child: Child, limit: int) -> bytes:
    kept = b""
    while chunk := await child.read(child.stderr):
        if len(kept) < limit:
            kept += chunk[: limit - len(kept)]
    return kept


async def _drain_lines(child: Child, collector: Collector) -> None:
    # surrogateescape: a path that is not UTF-8 still names its file (for its mtime); the
    # answer shows such bytes as \xNN escapes (TextContent).
    pending = b""
    while chunk := await child.read(child.stdout):
        pending += chunk
        *complete, pending = pending.split(b"\n")
        for raw in complete:
            collector.feed(raw.decode("utf-8", errors="surrogateescape"))
    if pending:
        collector.feed(pending.decode("utf-8", errors="surrogateescape"))


async def run_rg(
    argv: list[str],
    root_fd: int,
    collector: Collector,
    timeout_s: float,
    fds: tuple[int, ...] = (),
) -> tuple[int, str]:
    """Run ripgrep inside the already opened search root, feeding stdout to the collector;
    returns (exit code, stderr text).

    ripgrep starts in the directory behind `root_fd` (checked to be inside the workspace when it
    was opened) and searches relative paths, so swapping the search path for a symlink after the
    check cannot redirect it; below it, the confinement in the argv (Landlock) keeps every open
    inside the workspace. `fds` are the descriptors that confinement names. The process is
    killed if the call is cancelled or runs past the timeout.
    """
    try:
        child = Child(started_in(argv, root_fd), cwd="/", pass_fds=(root_fd, *fds))
    except FileNotFoundError as exc:
        raise _rg_missing() from exc
    stderr_task = asyncio.create_task(_read_capped(child, MAX_STDERR_BYTES))
    try:
        async with asyncio.timeout(timeout_s):
            await _drain_lines(child, collector)
            code = await child.wait()
            stderr = await stderr_task
    except TimeoutError as exc:
        raise timed_out(timeout_s) from exc
    finally:
        if not stderr_task.done():
            stderr_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await stderr_task
        await child.close()
    text = stderr.decode("utf-8", errors="replace").strip()
    if code == NOT_CONFINED_EXIT and text.startswith(HELPER_NAME):
        raise ToolError(
            f"The host-side search could not be confined, so it did not run ({text}). Use Bash "
            "(runs in the sandbox) to search instead, and tell the operator."
        )
    return code, text


class RunningSearches:
    """ripgrep processes running now in this daemon. A search alone uses ripgrep's own threads
    (one search can keep every core busy); searches side by side (a batch, many clients) get an
    equal share of the cores each, since more threads than cores only add switching."""

    def __init__(self, cores: int) -> None:
        self._cores = cores
        self._running = 0
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def share(self) -> Iterator[int | None]:
        """Count one search while inside; yields its thread cap (None: ripgrep's default)."""
        with self._lock:
            self._running += 1
            running = self._running
        try:
            yield None if running == 1 else max(1, self._cores // running)
        finally:
            with self._lock:
                self._running -= 1


SEARCHES = RunningSearches(len(os.sched_getaffinity(0)))
_RG_BY_PATH: dict[str, str] = {}


def find_ripgrep() -> str:
    """The rg executable on PATH; a found one is remembered for that PATH (a miss is not, so
    installing ripgrep needs no restart)."""
    search = os.environ.get("PATH", os.defpath)
    found = _RG_BY_PATH.get(search) or shutil.which("rg", path=search)
    if found is None:
        raise _rg_missing()
    _RG_BY_PATH[search] = found
    return found


def timed_out(timeout_s: float) -> ToolError:
    return ToolError(
        f"The search took longer than {timeout_s:g} s and was stopped. Narrow it with path, "
        "glob or type."
    )


def _rg_missing() -> ToolError:
    return ToolError(
        "Grep needs ripgrep (rg), which is not installed on the daemon's host. Search with Bash "
        "(grep -rn) instead, and tell the operator to install ripgrep."
    )


def search_error(stderr: str) -> ToolError:
    if "regex parse error" in stderr or "error parsing regex" in stderr:
        advice = (
            "Fix the pattern: it is a Rust regular expression, so escape literal ( ) [ ] { } . "
            "* + ? | with a backslash (or set multiline for patterns spanning lines)."
        )
    elif "unrecognized file type" in stderr:
        advice = (
            'Use a standard ripgrep type name such as "py", "js", "ts", "rust", "go", or use glob.'
        )
    elif "glob" in stderr:
        advice = "Fix the glob (e.g. '*.py' or 'src/**/*.ts')."
    else:
        advice = "Check the pattern, path, glob and type."
    return ToolError(f"ripgrep could not run the search:\n{stderr}\n{advice}")


@dataclass(frozen=True)
class SearchRoot:
    """Where ripgrep runs: an open directory inside the workspace and what to search in it."""

    fd: int
    """The directory ripgrep starts in (the caller closes it)."""
    target: str
    """"." for a directory, "./name" for a file."""
    shown_as: str
    """What ripgrep's leading "." stands for in the paths it prints (an absolute directory)."""


def open_search_root(
    workspace: PinnedDirectory, path: Path, raw: str, *, on_loop: bool = False
) -> SearchRoot:
    """Open the search root, refusing a missing path, a FIFO or device (rg would hang or read
    forever), or anything that leads out of the workspace. `on_loop`: as the event loop may
    (NeedsThread otherwise: `open_confined`)."""
    try:
        try:
            os.close(open_confined(workspace, path, on_loop=on_loop))
        except IsADirectoryError:
            directory = open_confined(workspace, path, directory=True, on_loop=on_loop)
            return SearchRoot(directory, ".", str(path))
        parent = open_confined(workspace, path.parent, directory=True, on_loop=on_loop)
        return SearchRoot(parent, f"./{path.name}", str(path.parent))
    except FileNotFoundError as exc:
        raise ToolError(
            f"{raw} does not exist. Give an existing file or directory as path, or omit path to "
            "search the whole workspace."
        ) from exc
    except PermissionError as exc:
        raise ToolError(f"{raw} cannot be read: permission denied.") from exc
    except OSError as exc:
        raise ToolError(
            f"{raw} changed while it was being checked ({exc.strerror}); retry."
        ) from exc
