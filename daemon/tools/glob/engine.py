"""The Glob engine: match a pattern against the files of a workspace, newest first.

The tree is walked through directory descriptors: every subdirectory is opened relative to its
parent with O_NOFOLLOW, so neither a symlinked directory nor one swapped for a symlink mid-walk can
lead the walk out of the workspace. Symlinked files are listed only when they resolve to a regular
file inside the workspace.

Pattern rules: `*`, `?` and `[...]` match within one path segment, `**` matches any number of
directories (zero included), `{a,b}` alternatives expand first. Names starting with a dot are
matched only by a segment that starts with a dot itself, and `**` does not enter dot-directories.
"""

from __future__ import annotations

import contextlib
import fnmatch
import itertools
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from daemon.errors import ToolError, ToolInputError
from daemon.host.confine import is_inside, open_confined, resolve_path
from daemon.host.pinned import PinnedDirectory

MAX_RESULTS = 100
"""Files listed; the rest are counted."""
MAX_SCANNED = 200_000
"""Directory entries looked at before the walk gives up (a runaway `**` in a huge tree)."""
MAX_PATTERNS = 64
"""Brace expansion may not produce more alternatives than this."""
PROGRESS_EVERY = 500
"""Directory entries between two progress reports of the walk."""

_MAGIC = re.compile(r"[*?\[{]")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def open_child_dir(parent_fd: int, name: str) -> int | None:
    """Open a subdirectory relative to its parent without following a symlink; None if it fails."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except OSError:
        # Vanished, unreadable, or replaced by a symlink since it was listed: skip it.
        return None


def expand_braces(pattern: str) -> list[str]:
    """Expand `{a,b}` alternatives (nested allowed); braces without a comma stay literal."""
    results: list[str] = []
    _expand(pattern, 0, results)
    return results


def _expand(pattern: str, search_from: int, out: list[str]) -> None:
    if len(out) > MAX_PATTERNS:
        return
    open_at = pattern.find("{", search_from)
    while open_at != -1:
        depth = 0
        commas: list[int] = []
        close_at = -1
        for index in range(open_at, len(pattern)):
            char = pattern[index]
            if char == "{":
                depth += 1
            elif char == "}":
                depth -= 1
                if depth == 0:
                    close_at = index
                    break
            elif char == "," and depth == 1:
                commas.append(index)
        if close_at == -1 or not commas:
            open_at = pattern.find("{", open_at + 1)
            continue
        bounds = [open_at, *commas, close_at]
        head, tail = pattern[:open_at], pattern[close_at + 1 :]
        for start, end in itertools.pairwise(bounds):
            _expand(head + pattern[start + 1 : end] + tail, open_at, out)
        return
    out.append(pattern)


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


def _segments(pattern: str) -> tuple[_Segment, ...]:
    parts = [p for p in pattern.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ToolInputError(
            f"pattern {pattern!r} contains '..'; patterns match below the search directory only. "
            "Give the directory to search as path instead."
        )
    segments: list[_Segment] = []
    for part in parts:
        if part == "**":
            if not segments or not segments[-1].is_globstar:
                segments.append(_Segment(part, None))
        else:
            segments.append(_Segment(part, re.compile(fnmatch.translate(part))))
    return tuple(segments)


@dataclass(frozen=True)
class GlobPlan:
    """Where to search and what to match, derived from the input."""

    base: Path
    """Resolved directory to search (may still be outside the workspace: checked in call)."""
    raw_base: str
    patterns: tuple[tuple[_Segment, ...], ...]


def plan_glob(pattern: str, path: str | None, workspace: Path) -> GlobPlan:
    """Split a pattern and its search directory (None: the workspace) into a base directory and
    compiled patterns; raises ToolInputError."""
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
    base = resolve_path(raw_base, "path")
    expanded = expand_braces(pattern)
    if len(expanded) > MAX_PATTERNS:
        raise ToolInputError(
            f"pattern {given!r} expands to more than {MAX_PATTERNS} alternatives; split it "
            "into several Glob calls."
        )
    patterns = tuple(dict.fromkeys(s for s in map(_segments, expanded) if s))
    if not patterns:
        raise ToolInputError(f"pattern {given!r} names no file; use e.g. '**/*'.")
    return GlobPlan(base=base, raw_base=raw_base, patterns=patterns)


@dataclass
class ScanCounter:
    """Directory entries looked at over all walks of one call, reported every PROGRESS_EVERY."""

    report: Callable[[int], None] | None = None
    """Gets the running total; called from the walking thread, so it must hand over safely."""
    total: int = 0
    _next: int = PROGRESS_EVERY

    def add(self, count: int) -> None:
        self.total += count
        if self.report is not None and self.total >= self._next:
            self._next = self.total + PROGRESS_EVERY
            self.report(self.total)


@dataclass
class _Walk:
    workspace: Path
    segments: tuple[_Segment, ...]
    counter: ScanCounter = field(default_factory=ScanCounter)
    found: dict[str, int] = field(default_factory=dict)
    """Absolute path -> mtime_ns."""
    scanned: int = 0
    stopped: bool = False


def _closure(segments: tuple[_Segment, ...], states: set[int]) -> set[int]:
    """Add the states reached by letting a `**` match zero directories."""
    result = set(states)
    for index in sorted(states):
        while index < len(segments) and segments[index].is_globstar:
            index += 1
            result.add(index)
    return result


def _file_mtime(walk: _Walk, entry: os.DirEntry[str], full: Path) -> int | None:
    """mtime of a matching regular file, or None if it is not one (or leads outside)."""
    try:
        if entry.is_symlink():
            real = Path(os.path.realpath(full))
            if not is_inside(walk.workspace, real):
                return None
            info = real.stat()
            return info.st_mtime_ns if stat.S_ISREG(info.st_mode) else None
        if not entry.is_file(follow_symlinks=False):
            return None
        return entry.stat(follow_symlinks=False).st_mtime_ns
    except OSError:
        return None


def _visit(walk: _Walk, fd: int, directory: Path, states: set[int]) -> list[_Pending]:
    """Match the entries of one directory; the subdirectories still to visit, in order."""
    segments = walk.segments
    last = len(segments) - 1
    states = _closure(segments, states)
    try:
        with os.scandir(fd) as listing:
            entries = list(listing)
    except OSError:
        return []
    walk.scanned += len(entries)
    if walk.scanned > MAX_SCANNED:
        walk.stopped = True
        return []
    children: dict[str, set[int]] = {}
    for entry in sorted(entries, key=lambda e: e.name):
        walk.counter.add(1)  # per entry: one huge directory still reports as it goes
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
        except OSError:
            continue
        for index in states:
            if index > last:
                continue
            segment = segments[index]
            if not segment.matches(entry.name):
                continue
            if is_dir:
                next_state = index if segment.is_globstar else index + 1
                if next_state <= last:
                    children.setdefault(entry.name, set()).add(next_state)
            elif index == last:
                full = directory / entry.name
                mtime = _file_mtime(walk, entry, full)
                if mtime is not None:
                    walk.found[str(full)] = mtime
    return [(directory / name, child_states) for name, child_states in children.items()]


_Pending = tuple[Path, set[int]]


def _walk(walk: _Walk, root: PinnedDirectory, base_fd: int, base: Path) -> None:
    """Depth first, with a list rather than recursion (a tree can be thousands of levels deep),
    each directory opened from the pinned workspace without following a symlink and closed
    before the next (no descriptor is held per level)."""
    pending: list[_Pending] = [(base, {0})]
    while pending and not walk.stopped:
        directory, states = pending.pop()
        if directory == base:
            children = _visit(walk, base_fd, directory, states)
        else:
            fd = _open_below(root, directory)
            if fd is None:
                continue
            try:
                children = _visit(walk, fd, directory, states)
            finally:
                os.close(fd)
        pending.extend(reversed(children))


def _open_below(root: PinnedDirectory, directory: Path) -> int | None:
    """A subdirectory, resolved by the kernel beneath the pinned workspace with no symlink on the
    way; None when it vanished, is unreadable, or was replaced by a symlink since it was listed."""
    relative = str(directory)[len(str(root.path)) :].lstrip("/")
    try:
        return root.open_beneath(relative, _DIR_FLAGS)
    except OSError:
        return None


@dataclass(frozen=True)
class GlobResult:
    """Matching files, newest first."""

    files: tuple[str, ...]
    """Shown files (at most MAX_RESULTS), absolute paths."""
    total: int
    """All matches found."""
    scan_stopped: bool = False
    """The walk gave up after MAX_SCANNED entries; there may be more matches."""
    scanned: int = 0
    """Directory entries looked at."""
    shown: str = ""
    """The searched directory as people read it (relative to the workspace), for the summary."""


def glob_files(
    root: PinnedDirectory, plan: GlobPlan, counter: ScanCounter | None = None
) -> GlobResult:
    with contextlib.suppress(OSError):
        if not stat.S_ISDIR(plan.base.lstat().st_mode):
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
    found: dict[str, int] = {}
    stopped = False
    counter = counter or ScanCounter()
    try:
        for segments in plan.patterns:
            walk = _Walk(workspace=root.path, segments=segments, counter=counter)
            _walk(walk, root, fd, plan.base)
            found.update(walk.found)
            stopped = stopped or walk.stopped
    finally:
        os.close(fd)
    ordered = sorted(found.items(), key=lambda item: (-item[1], item[0]))
    return GlobResult(
        files=tuple(path for path, _ in ordered[:MAX_RESULTS]),
        total=len(ordered),
        scan_stopped=stopped,
        scanned=counter.total,
    )
