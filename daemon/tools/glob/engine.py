"""The Glob engine: match a pattern against the files of a workspace, newest first.

The tree is walked through directory descriptors: every subdirectory is opened relative to its
parent with O_NOFOLLOW, so neither a symlinked directory nor one swapped for a symlink mid-walk can
lead the walk out of the workspace. Symlinked files are listed only when they resolve to a regular
file inside the workspace.

Pattern rules: `*`, `?` and `[...]` match within one path segment, `**` matches any number of
directories (zero included), `{a,b}` alternatives expand first (`braces`). Names starting with a
dot are matched only by a segment that starts with a dot itself, and `**` does not enter
dot-directories.

One call is one walk, whatever its alternatives: all of them are matched together while each
directory is listed once, so the call has one entry budget. A directory is read entry by entry and
the walk's limits (`Walk`) are checked before each one, so a directory of millions of entries is
never held in memory, and a walk ends promptly at its budget, its deadline, or when the call is
cancelled, keeping what it found so far.
"""

from __future__ import annotations

import errno
import fnmatch
import functools
import heapq
import os
import re
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from daemon.errors import ToolError, ToolInputError
from daemon.host.confine import is_inside, mode_beneath, open_confined, resolve_path
from daemon.host.pinned import PinnedDirectory
from daemon.tools.glob.braces import expand_braces
from daemon.tools.summaries import quoted
from sandbox.openat2 import RESOLVE_BENEATH, RESOLVE_NO_MAGICLINKS, openat2

MAX_LINK_HOPS = 8
"""Links followed one at a time for a matching link whose chain holds absolute links."""
_LINKS_BENEATH = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS
MAX_RESULTS = 100
"""Files listed; the rest are counted."""
MAX_SCANNED = 200_000
"""Directory entries one call may look at, over all its alternatives (a runaway `**` in a huge
tree, a directory of millions of files)."""
PROGRESS_EVERY = 500
"""Directory entries between two progress reports of the walk."""
MAX_PATTERN_CHARS = 16_384
"""The alternatives of one pattern together may not be longer (each is compiled to a regular
expression and matched against every entry)."""

_MAGIC = re.compile(r"[*?\[{]")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def open_child_dir(parent_fd: int, name: str) -> int | None:
    """Open a subdirectory relative to its parent without following a symlink; None if it fails."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except OSError:
        # Vanished, unreadable, or replaced by a symlink since it was listed: skip it.
        return None


@dataclass(frozen=True)
class _Segment:
    text: str
    regex: re.Pattern[str] | None
    """None for `**`."""

    @property
    def is_globstar(self) -> bool:
        return self.regex is None

    def matches(self, name: str) -> bool:
        if self.regex is None:
            return not name.startswith(".")
        if name.startswith(".") and not self.text.startswith("."):
            return False
        return self.regex.fullmatch(name) is not None


_Pattern = tuple[_Segment, ...]


def _split(pattern: str) -> tuple[str, ...]:
    """The segments of one alternative (`.` and empty ones dropped, `**` runs merged); checked
    here, compiled later by the walking thread (`_compile`)."""
    parts = [p for p in pattern.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ToolInputError(
            f"pattern {pattern!r} contains '..'; patterns match below the search directory only. "
            "Give the directory to search as path instead."
        )
    return tuple(p for i, p in enumerate(parts) if p != "**" or i == 0 or parts[i - 1] != "**")


@functools.lru_cache(maxsize=1024)
def _compile_segment(text: str) -> _Segment:
    return _Segment(text, None if text == "**" else re.compile(fnmatch.translate(text)))


def _compile(patterns: tuple[tuple[str, ...], ...]) -> tuple[_Pattern, ...]:
    """Compiling a long pattern with many wildcards takes a while: done off the event loop."""
    return tuple(tuple(map(_compile_segment, segments)) for segments in patterns)


@dataclass(frozen=True)
class GlobPlan:
    """Where to search and what to match, derived from the input."""

    base: Path
    """Resolved directory to search (may still be outside the workspace: checked in call)."""
    raw_base: str
    patterns: tuple[tuple[str, ...], ...]
    """Every alternative of the pattern, as its segments (at most MAX_PATTERNS)."""


def plan_glob(
    pattern: str,
    path: str | None,
    workspace: Path,
    within: PinnedDirectory | None,
    base: Path | None = None,
) -> GlobPlan:
    """Split a pattern and its search directory (None: the workspace) into a base directory,
    resolved as `resolve_path` does beneath the pinned workspace `within` (or `base`, resolved
    already), and the segments of its alternatives; raises ToolInputError. Cheap (no regular
    expression is compiled here): it runs on the event loop when the call is prepared."""
    given = pattern
    if "\x00" in pattern:
        raise ToolInputError("pattern contains a NUL byte; remove it.")
    raw_base = path if path is not None else str(workspace)
    if pattern.startswith("/"):
        # An absolute pattern: its literal leading directories become the base.
        parts = pattern.split("/")
        literal = 1
        while literal < len(parts) - 1 and not _MAGIC.search(parts[literal]):
            literal += 1
        raw_base = "/".join(parts[:literal]) or "/"
        pattern = "/".join(parts[literal:])
    if base is None:
        base = resolve_path(raw_base, "path", within)
    expanded = expand_braces(pattern)
    size = sum(map(len, expanded))
    if size > MAX_PATTERN_CHARS:
        raise ToolInputError(
            f"pattern {quoted(given, 80)} expands to {len(expanded)} alternatives of {size} "
            f"characters in all, more than {MAX_PATTERN_CHARS}; split it into several Glob calls."
        )
    patterns = tuple(dict.fromkeys(s for s in map(_split, expanded) if s))
    if not patterns:
        raise ToolInputError(f"pattern {given!r} names no file; use e.g. '**/*'.")
    return GlobPlan(base=base, raw_base=raw_base, patterns=patterns)


class Stop(StrEnum):
    """Why a walk ended before it had looked at everything."""

    BUDGET = "budget"
    """MAX_SCANNED entries were looked at."""
    DEADLINE = "deadline"
    """The call's time was up."""
    CANCELLED = "cancelled"
    """The call was cancelled (its result is not used)."""


@dataclass(frozen=True)
class GlobResult:
    """Matching files, newest first."""

    files: tuple[str, ...]
    """Shown files (at most MAX_RESULTS), absolute paths."""
    total: int
    """All matches found."""
    stopped: Stop | None = None
    """Why the walk ended early, if it did; there may then be more matches."""
    scanned: int = 0
    """Directory entries looked at."""
    shown: str = ""
    """The searched directory as people read it (relative to the workspace), for the summary."""
    deadline_s: float = 0.0
    """The time the walk had, for the note when it ran out."""


@dataclass
class Walk:
    """One call's walk, shared by the thread that walks and the event loop that waits for it: its
    limits, a stop signal either side may raise, and what was found so far (readable at any time,
    so a walk stuck in the kernel still gives a partial answer)."""

    deadline: float
    """When the walk must end, on `clock`."""
    clock: Callable[[], float]
    budget: int = MAX_SCANNED
    """Directory entries it may look at."""
    report: Callable[[int], None] | None = None
    """Gets the running count of entries every PROGRESS_EVERY; called from the walking thread,
    so it must hand over safely."""
    scanned: int = field(default=0, init=False)
    """Entries looked at so far (written by the walking thread only)."""
    _stopped: Stop | None = field(default=None, init=False)
    _found: dict[str, int] = field(default_factory=dict, init=False)
    """Absolute path -> mtime_ns."""
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    """Guards `_found` and `_stopped`, which both threads touch."""

    @property
    def stopped(self) -> Stop | None:
        """Why the walk was stopped; None while it may go on."""
        return self._stopped

    def stop(self, reason: Stop) -> None:
        """End the walk before its next entry (from any thread); the first reason given stays."""
        with self._lock:
            if self._stopped is None:
                self._stopped = reason

    def admit(self) -> bool:
        """Count one more entry to look at; False when the walk must end instead."""
        if self._stopped is not None:
            return False
        if self.scanned >= self.budget:
            self.stop(Stop.BUDGET)
            return False
        if self.clock() >= self.deadline:
            self.stop(Stop.DEADLINE)
            return False
        self.scanned += 1
        if self.report is not None and self.scanned % PROGRESS_EVERY == 0:
            self.report(self.scanned)
        return True

    def found(self, path: str, mtime_ns: int) -> None:
        """Record a matching file."""
        with self._lock:
            self._found[path] = mtime_ns

    def result(self) -> GlobResult:
        """What was found so far, newest first (the first MAX_RESULTS)."""
        with self._lock:
            found = list(self._found.items())
            stopped = self._stopped
        newest = heapq.nsmallest(MAX_RESULTS, found, key=lambda item: (-item[1], item[0]))
        return GlobResult(
            files=tuple(path for path, _ in newest),
            total=len(found),
            stopped=stopped,
            scanned=self.scanned,
        )


_State = tuple[int, int]
"""(alternative, segment): where one alternative's match stands in a directory."""
_Pending = tuple[Path, frozenset[_State]]


def _closure(patterns: tuple[_Pattern, ...], states: frozenset[_State]) -> list[_State]:
    """The states plus those reached by letting a `**` match zero directories."""
    result = set(states)
    for alternative, index in states:
        segments = patterns[alternative]
        while index < len(segments) and segments[index].is_globstar:
            index += 1
            result.add((alternative, index))
    return sorted(result)


def _file_mtime(root: PinnedDirectory, entry: os.DirEntry[str], full: Path) -> int | None:
    """mtime of a matching regular file, or None if it is not one (or leads outside)."""
    try:
        if entry.is_symlink():
            return _link_mtime(root, full)
        if not entry.is_file(follow_symlinks=False):
            return None
        return entry.stat(follow_symlinks=False).st_mtime_ns
    except OSError:
        return None


def _link_mtime(root: PinnedDirectory, link: Path) -> int | None:
    """mtime of the regular file a symbolic link leads to inside the workspace, or None. The
    kernel follows the link beneath the workspace (RESOLVE_BENEATH): nothing outside is ever
    looked at, not even on the way (a path resolved as text told, by being listed or not, whether
    outside paths were links, and how deep another process's working directory was). The kernel
    refuses links to absolute paths there; one whose chain ends in such links to paths inside the
    workspace is followed a link at a time (at most MAX_LINK_HOPS), each from the workspace."""
    path = _below(root, link)
    for _ in range(MAX_LINK_HOPS):
        try:
            fd = openat2(root.fd, path, os.O_PATH, _LINKS_BENEATH)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                return None
            hop = _next_hop(root, path)
            if hop is None:
                return None
            path = hop
            continue
        return _regular_file_mtime(fd)
    return None


def _regular_file_mtime(fd: int) -> int | None:
    """mtime of what an open descriptor (O_PATH will do) names when it is a regular file, else
    None; the descriptor is closed."""
    try:
        info = os.fstat(fd)
    finally:
        os.close(fd)
    return info.st_mtime_ns if stat.S_ISREG(info.st_mode) else None


def _next_hop(root: PinnedDirectory, path: str) -> str | None:
    """Where the link at `path` (reached beneath the workspace) leads, relative to the workspace;
    None when `path` is no link (an absolute link on its way) or leads to an absolute path
    outside. A relative target is joined as text: the kernel resolves its `..` beneath."""
    try:
        fd = openat2(root.fd, path, os.O_PATH | os.O_NOFOLLOW, _LINKS_BENEATH)
    except OSError:
        return None
    try:
        target = os.readlink("", dir_fd=fd)
    except OSError:
        return None
    finally:
        os.close(fd)
    # Joined as text, never normalised: a trailing "/" or "/." asks the kernel for a directory.
    if not target.startswith("/"):
        folder = path.rpartition("/")[0]
        return f"{folder}/{target}" if folder else target
    if not is_inside(root.path, Path(target)):
        return None
    return target[len(str(root.path)) :].lstrip("/") or "."


def _below(root: PinnedDirectory, path: Path) -> str:
    """`path` (inside the workspace) relative to it."""
    return str(path)[len(str(root.path)) :].lstrip("/") or "."


@dataclass(frozen=True)
class _Walker:
    """What one walk goes by: the pinned workspace, the compiled alternatives, and the `Walk`
    it counts its entries in and puts its matches into."""

    walk: Walk
    root: PinnedDirectory
    patterns: tuple[_Pattern, ...]

    def run(self, base_fd: int, base: Path) -> None:
        """Depth first, with a list rather than recursion (a tree can be thousands of levels
        deep), each directory opened from the pinned workspace without following a symlink and
        closed before the next (no descriptor is held per level)."""
        start = frozenset((alternative, 0) for alternative in range(len(self.patterns)))
        pending: list[_Pending] = [(base, start)]
        while pending and self.walk.stopped is None:
            directory, states = pending.pop()
            if directory == base:
                children = self._visit(base_fd, directory, states)
            else:
                fd = _open_below(self.root, directory)
                if fd is None:
                    continue
                try:
                    children = self._visit(fd, directory, states)
                finally:
                    os.close(fd)
            pending.extend(reversed(children))

    def _visit(self, fd: int, directory: Path, states: frozenset[_State]) -> list[_Pending]:
        """Match the entries of one directory, read one at a time; the subdirectories still to
        visit, in name order (only those some alternative goes on into are kept)."""
        expanded = _closure(self.patterns, states)
        children: dict[str, set[_State]] = {}
        try:
            with os.scandir(fd) as listing:
                for entry in listing:
                    if not self.walk.admit():
                        break
                    self._match(entry, directory, expanded, children)
        except OSError:
            pass  # unreadable, or gone while it was read: what was matched so far stands
        return [(directory / name, frozenset(children[name])) for name in sorted(children)]

    def _match(
        self,
        entry: os.DirEntry[str],
        directory: Path,
        states: list[_State],
        children: dict[str, set[_State]],
    ) -> None:
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
        except OSError:
            return
        for alternative, index in states:
            segments = self.patterns[alternative]
            last = len(segments) - 1
            if index > last:
                continue
            segment = segments[index]
            if not segment.matches(entry.name):
                continue
            if is_dir:
                next_state = index if segment.is_globstar else index + 1
                if next_state <= last:
                    children.setdefault(entry.name, set()).add((alternative, next_state))
            elif index == last:
                full = directory / entry.name
                mtime = _file_mtime(self.root, entry, full)
                if mtime is not None:
                    self.walk.found(str(full), mtime)


def _open_below(root: PinnedDirectory, directory: Path) -> int | None:
    """A subdirectory, resolved by the kernel beneath the pinned workspace with no symlink on the
    way; None when it vanished, is unreadable, or was replaced by a symlink since it was listed."""
    try:
        return root.open_beneath(_below(root, directory), _DIR_FLAGS)
    except OSError:
        return None


def glob_files(root: PinnedDirectory, plan: GlobPlan, walk: Walk) -> GlobResult:
    """Walk the plan's base directory within `walk`'s limits (blocking: run it in a thread,
    never on the event loop)."""
    mode = mode_beneath(root, plan.base)
    if mode is not None and not stat.S_ISDIR(mode):
        raise ToolError(
            f"{plan.raw_base} is not a directory. Give a directory as path (or put the file "
            "name in the pattern)."
        )
    try:
        fd = open_confined(root, plan.base, directory=True)
    except FileNotFoundError as exc:
        raise ToolError(
            f"Directory {plan.raw_base} does not exist. Give an existing directory as path, or "
            "omit path to search the whole workspace."
        ) from exc
    except PermissionError as exc:
        raise ToolError(f"Directory {plan.raw_base} cannot be read: permission denied.") from exc
    try:
        _Walker(walk, root, _compile(plan.patterns)).run(fd, plan.base)
    finally:
        os.close(fd)
    return walk.result()
