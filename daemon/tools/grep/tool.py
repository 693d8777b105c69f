"""Grep: search file contents of the workspace with ripgrep.

ripgrep runs on the host with a fixed argv (no shell, `--no-config`, the pattern after `--`), on a
path confined to the workspace. It never follows symlinks (its default), so it cannot be led out
of the workspace by one. File choice, documented for the model: hidden files are searched (except
`.git/`), ignore files (.gitignore inside a git repository, .ignore, .rgignore) are respected,
binary files are skipped. Content and count results are sorted by path so that `offset` pages
through a stable order; files_with_matches is sorted by modification time, newest first, like Glob.

Grep calls of one parallel group (an assistant turn) that search the same path with the same
glob, type and case rule in files_with_matches mode share one walk of the files
(daemon/tools/grep/shared.py); each still gets exactly the answer of a search of its own.

Progress for the person watching: the running count of matching files (or lines) every quarter
second, and at the end how many files ripgrep searched, from `--stats` in content and count modes
(there ripgrep reads whole files anyway; in files_with_matches mode the flag would stop it from
quitting a file at its first match, so that mode reports matching files only).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import os
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from daemon.errors import ToolError, ToolInputError
from daemon.host.confine import require_inside, resolve_path
from daemon.host.landlock import Confined, confined
from daemon.host.loop_safe import NeedsThread
from daemon.host.pinned import PinnedDirectory
from daemon.host.threads import FILESYSTEM_THREADS
from daemon.host.turns import PrincipalTurns
from daemon.models import TextContent
from daemon.tools.contract import (
    CallContext,
    CallFacts,
    InterruptBehavior,
    ProgressUpdate,
    Tool,
    ToolOutput,
    ToolTraits,
    TouchedPath,
)
from daemon.tools.grep.input import (
    DEFAULT_HEAD_LIMIT,
    MAX_COLUMNS,
    RESULT_BUDGET_CHARS,
    GrepInput,
    OutputMode,
    build_argv,
    context_lines,
    scope_flags,
    threads_flag,
)
from daemon.tools.grep.ripgrep import (
    SEARCHES,
    Collector,
    SearchRoot,
    absolute,
    find_ripgrep,
    open_search_root,
    run_rg,
    search_error,
    timed_out,
)
from daemon.tools.grep.shared import files_per_pattern
from daemon.tools.summaries import failed, plural, quoted, shown_path

if TYPE_CHECKING:
    from daemon.sessions.session import Session

INLINE_STAT_PATHS = 64
"""Up to this many matching files are sorted by mtime on the event loop, more in a thread."""
PROGRESS_INTERVAL_S = 0.25
"""Running counts are reported at most this often."""
STAMP_CHECK_EVERY = 64
"""The mtime sort looks at its deadline once per this many files."""
_clock = time.monotonic  # what the mtime sort's deadline is measured on (tests move it)
SEARCH_MEMORY_MB = 256
"""What one ripgrep process may map: it holds a whole line in memory, and a line of a hostile
file can be a gigabyte (attacker round 141: 8 Greps at once took 10 GB of the host's memory,
outside every budget). Lines up to about a hundred megabytes fit."""
_CORES = len(os.sched_getaffinity(0))
SEARCH_TURNS = PrincipalTurns(max(4, 2 * _CORES), per_principal=max(2, _CORES))
"""Searches running at once, per principal and in all (each up to SEARCH_MEMORY_MB; more than
the cores gain nothing but switching), so that one tenant's calls cannot hold the host's memory
and another's search waits for at most a few of them."""


@contextlib.asynccontextmanager
async def _turn(ctx: CallContext, timeout_s: float) -> AsyncIterator[None]:
    """The session owner's turn to search (SEARCH_TURNS), waited for at most `timeout_s`."""
    waiting = SEARCH_TURNS.turn(ctx.session.owner)
    try:
        async with asyncio.timeout(timeout_s):
            await waiting.__aenter__()
    except TimeoutError as exc:
        raise timed_out(timeout_s) from exc
    try:
        yield
    finally:
        await waiting.__aexit__(None, None, None)


class _Throttled:
    """Reports a running count as progress at most every PROGRESS_INTERVAL_S."""

    def __init__(self, ctx: CallContext, noun: str, nouns: str) -> None:
        self._ctx = ctx
        self._noun = noun
        self._nouns = nouns
        self._next = time.monotonic() + PROGRESS_INTERVAL_S

    def __call__(self, count: int) -> None:
        now = time.monotonic()
        if now >= self._next:
            self._next = now + PROGRESS_INTERVAL_S
            found = plural(count, self._noun, self._nouns)
            self._ctx.report(ProgressUpdate(message=f"{found} so far"))


@dataclass(frozen=True)
class GrepResult:
    """What the search found, already windowed by offset/head_limit."""

    mode: OutputMode
    lines: tuple[str, ...]
    """Shown lines (content) or entries (paths, or path:count)."""
    total: int
    """All lines or entries ripgrep produced."""
    offset: int
    total_matches: int = 0
    """count mode: matching lines summed over all files."""
    warnings: str = ""
    """ripgrep's error output when it still found matches (e.g. an unreadable file)."""
    capped: bool = False
    """Too much output to keep in memory; later lines were counted only."""
    files_searched: int | None = None
    """Files ripgrep searched (content and count modes, from --stats)."""
    matched_lines: int | None = None
    """Lines that matched (content mode, from --stats; context lines not counted)."""
    files_matched: int | None = None
    """Files with at least one match (content mode, from --stats)."""
    shown: str = ""
    """The searched path as people read it (relative to the workspace), for the summary."""
    shared_with: int = 0
    """Parallel Grep calls that shared this call's walk of the files (0: it searched alone)."""
    unsorted: int = 0
    """files_with_matches: the last files, left in ripgrep's order (the mtime sort ran out of
    time)."""


def _by_mtime(
    root: PinnedDirectory, paths: list[str], deadline: float, *, on_loop: bool = False
) -> tuple[list[str], int]:
    """`paths` (ripgrep's, inside the workspace) newest first, and how many of the last were
    left in ripgrep's order because `deadline` (on `_clock`) came first: a slow filesystem
    must not hold a thread past the call. Each is looked at beneath the pinned workspace by the
    kernel, never by its text (a link swapped in would lead out). `on_loop`: as the event loop
    may (NeedsThread otherwise, daemon.host.loop_safe)."""
    if on_loop and not root.local:
        raise NeedsThread("the workspace is not on a local filesystem")
    base = len(str(root.path))

    def mtime(path: str) -> int:
        try:
            fd = root.open_beneath(
                path[base:].lstrip("/"), os.O_PATH, same_mount=on_loop, cached=on_loop
            )
        except OSError as exc:
            if on_loop and exc.errno in (errno.EAGAIN, errno.EXDEV):
                raise NeedsThread(path) from exc
            return 0
        try:
            return os.fstat(fd).st_mtime_ns
        finally:
            os.close(fd)

    stamped: list[tuple[int, str]] = []
    for index, path in enumerate(paths):
        if index % STAMP_CHECK_EVERY == 0 and _clock() >= deadline:
            break
        stamped.append((mtime(path), path))
    stamped.sort(key=lambda item: (-item[0], item[1]))
    rest = paths[len(stamped) :]
    return [path for _, path in stamped] + rest, len(rest)


def _count_of(entry: str) -> int:
    _, _, number = entry.rpartition(":")
    return int(number) if number.isdigit() else 0


async def _open_search_root(ctx: CallContext, path: Path, raw: str) -> SearchRoot:
    """`open_search_root`: a few system calls on the event loop where it may make them, else in
    one of the session owner's threads."""
    pinned = ctx.session.pinned_root()
    try:
        return open_search_root(pinned, path, raw, on_loop=True)
    except NeedsThread:
        return await FILESYSTEM_THREADS.run(
            ctx.session.owner,
            functools.partial(open_search_root, pinned, path, raw),
            release=lambda root: os.close(root.fd),
        )


async def _listing(
    args: GrepInput,
    ctx: CallContext,
    paths: list[str],
    path: Path,
    directory: bool,
    *,
    total: int | None = None,
    warnings: str = "",
    capped: bool = False,
    shared_with: int = 0,
) -> GrepResult:
    """files_with_matches: the matching files newest first, windowed by offset/head_limit;
    `total`: how many there are when `paths` could not keep them all."""
    total = len(paths) if total is None else total
    offset = args.offset or 0
    head_limit = DEFAULT_HEAD_LIMIT if args.head_limit is None else args.head_limit
    root = ctx.session.pinned_root()
    deadline = _clock() + ctx.limits.timeout_ms / 1000
    try:
        if len(paths) > INLINE_STAT_PATHS:
            raise NeedsThread("too many files to look at on the event loop")
        ordered, unsorted = _by_mtime(root, paths, deadline, on_loop=True)
    except NeedsThread:
        ordered, unsorted = await FILESYSTEM_THREADS.run(
            ctx.session.owner, functools.partial(_by_mtime, root, paths, deadline)
        )
    end = offset + head_limit if head_limit else None
    ctx.report(ProgressUpdate(message=f"{plural(total, 'matching file')} found"))
    return GrepResult(
        mode="files_with_matches",
        lines=tuple(ordered[offset:end]),
        total=total,
        offset=offset,
        warnings=warnings,
        capped=capped,
        shown=shown_path(path, ctx.workspace, directory=directory),
        shared_with=shared_with,
        unsorted=unsorted,
    )


class GrepTool(Tool[GrepInput, GrepResult]):
    """Search file contents with ripgrep."""

    name = "Grep"
    description = (
        "Searches file contents with ripgrep (regular expressions, fast). Use it instead of "
        "grep or rg through Bash.\n"
        "- pattern is a Rust regular expression (e.g. 'log.*Error', "
        r"'def\s+\w+'); escape literal ( ) [ ] { } with a backslash. Narrow the search with "
        'path (a file or directory), glob (e.g. "*.py", "**/*.{ts,tsx}") or type (e.g. "py", '
        '"js").\n'
        '- output_mode: "files_with_matches" (default) lists matching files, newest first; '
        '"content" shows matching lines as path:line:text, with "-A"/"-B"/"-C" context lines, '
        '"-n" line numbers (on by default) and "-o" for only the match; "count" shows matching '
        'lines per file and a total. "-i" ignores case; multiline lets a match span lines.\n'
        f"- Limits: head_limit lines or entries are shown (default {DEFAULT_HEAD_LIMIT}, 0 = no "
        "limit; use offset to page on); the result is cut at about "
        f"{RESULT_BUDGET_CHARS} characters; lines longer than {MAX_COLUMNS} characters are "
        "shown as a preview; a search that runs past the time limit (120 s unless the policy "
        "sets another) is stopped.\n"
        "- Hidden files are searched, .git is not; files ignored by .gitignore (in a git "
        "repository) and binary files are skipped; symbolic links are not followed.\n"
        "- To find files by name, use Glob. Several Grep calls can run in parallel."
    )
    input_model = GrepInput
    traits = ToolTraits(
        read_only=True,
        destructive=False,
        concurrency_safe=True,
        sandboxed=False,
        interrupt=InterruptBehavior.CANCEL,
        max_result_chars=RESULT_BUDGET_CHARS,
        shares_work=True,
    )

    def validate(self, args: GrepInput, session: Session) -> GrepInput:
        if "\x00" in args.pattern:
            raise ToolInputError("pattern contains a NUL byte; remove it.")
        context_lines(args)
        return args

    def analyse(self, args: GrepInput, session: Session) -> CallFacts:
        path = (
            session.workspace
            if args.path is None
            else resolve_path(args.path, "path", session.root)
        )
        return self.facts(paths=[TouchedPath.of(session.workspace, path, "read", "path")])

    async def call(self, args: GrepInput, ctx: CallContext) -> GrepResult:
        raw = args.path if args.path is not None else str(ctx.workspace)
        path = require_inside(ctx.workspace, ctx.facts.path("path"), raw)
        # ripgrep may read the pinned workspace and run its own files, nothing else.
        rg = await confined(find_ripgrep(), ctx.session.pinned_root(), memory_mb=SEARCH_MEMORY_MB)
        if ctx.peers is not None:
            shared = await self._search_shared(rg, args, ctx, path, raw)
            if shared is not None:
                return shared
        root = await _open_search_root(ctx, path, raw)
        try:
            return await self._search(rg, args, ctx, root, path)
        finally:
            os.close(root.fd)

    async def _search_shared(
        self, rg: Confined, args: GrepInput, ctx: CallContext, path: Path, raw: str
    ) -> GrepResult | None:
        """This call's part of one walk shared with parallel siblings that search the same
        files the same way (daemon/tools/grep/shared.py); None: search alone."""
        assert ctx.peers is not None
        if args.output_mode != "files_with_matches" or args.multiline:
            ctx.peers.leave()
            return None
        timeout_s = ctx.limits.timeout_ms / 1000
        key = (str(path), args.glob, args.file_type, bool(args.ignore_case))
        cohort, place = await ctx.peers.join(key, (args.pattern, timeout_s))
        if len(cohort.items) < 2:
            return None

        async def walk(
            items: tuple[tuple[str, float], ...],
        ) -> tuple[list[list[str]] | None, SearchRoot]:
            root = await _open_search_root(ctx, path, raw)
            try:
                async with SEARCH_TURNS.turn(ctx.session.owner):
                    with SEARCHES.share() as threads:
                        scope = [*threads_flag(threads), *scope_flags(args)]
                        async with asyncio.timeout(max(limit for _, limit in items)):
                            found = await files_per_pattern(
                                rg,
                                root.fd,
                                root.target,
                                scope,
                                [pattern for pattern, _ in items],
                                bool(args.ignore_case),
                            )
                return found, root
            finally:
                os.close(root.fd)

        try:
            async with asyncio.timeout(timeout_s):
                found, root = await cohort.share(walk)
        except TimeoutError as exc:
            raise timed_out(timeout_s) from exc
        if found is None:
            return None
        paths = [absolute(entry, root.shown_as) for entry in found[place]]
        return await _listing(
            args, ctx, paths, path, directory=root.target == ".", shared_with=len(found) - 1
        )

    async def _search(
        self, rg: Confined, args: GrepInput, ctx: CallContext, root: SearchRoot, path: Path
    ) -> GrepResult:
        offset = args.offset or 0
        head_limit = DEFAULT_HEAD_LIMIT if args.head_limit is None else args.head_limit
        keep = head_limit or None
        windowed = args.output_mode == "content"
        # files_with_matches is sorted by mtime and count sums all entries: keep them all.
        collector = Collector(
            skip=offset if windowed else 0,
            keep=keep if windowed else None,
            read_stats=args.output_mode != "files_with_matches",
            progress=_running_count(ctx, args.output_mode),
            shown_as=root.shown_as,
        )
        timeout_s = ctx.limits.timeout_ms / 1000
        async with _turn(ctx, timeout_s):
            with SEARCHES.share() as threads:
                code, stderr = await run_rg(
                    build_argv(rg, args, root.target, threads),
                    root.fd,
                    collector,
                    timeout_s,
                    rg.fds,
                )
        if code < 0 or "memory allocation of" in stderr:
            raise ToolError(
                f"ripgrep ran out of the memory a search may use ({SEARCH_MEMORY_MB} MB): a file "
                "with a very long line takes it. Search fewer files (glob, type, path), or use "
                "Bash (runs in the sandbox)."
            )
        if code == 2 and collector.total == 0:
            raise search_error(stderr)
        if code not in (0, 1, 2):
            raise ToolError(f"ripgrep failed with exit code {code}: {stderr or '(no message)'}")
        directory = root.target == "."
        if args.output_mode == "files_with_matches":
            return await _listing(
                args,
                ctx,
                collector.lines,
                path,
                directory,
                total=collector.total,
                warnings=stderr if code == 2 else "",
                capped=collector.capped,
            )
        lines = collector.lines
        total_matches = 0
        if args.output_mode == "count":
            total_matches = sum(_count_of(entry) for entry in lines)
            end = offset + head_limit if head_limit else None
            lines = lines[offset:end]
        searched = collector.stats.get("files searched")
        if searched is not None:
            ctx.report(ProgressUpdate(files_scanned=searched, message=f"searched {searched} files"))
        return GrepResult(
            mode=args.output_mode,
            lines=tuple(lines),
            total=collector.total,
            offset=offset,
            total_matches=total_matches,
            warnings=stderr if code == 2 else "",
            capped=collector.capped,
            files_searched=searched,
            matched_lines=collector.stats.get("matched lines"),
            files_matched=collector.stats.get("files contained matches"),
            shown=shown_path(path, ctx.workspace, directory=directory),
        )

    def render(self, result: GrepResult) -> ToolOutput:
        return _render(result)

    def summarize(self, args: GrepInput, result: GrepResult | None, output: ToolOutput) -> str:
        if result is None:
            return failed(self.name, output)
        pattern = quoted(args.pattern)
        where = f" in {result.shown}" if args.path is not None and result.shown else ""
        if result.total == 0:
            return f"No matches for {pattern}{where}"
        if result.mode == "files_with_matches":
            shared = (
                f" (one search shared with {plural(result.shared_with, 'other Grep call')})"
                if result.shared_with
                else ""
            )
            return f"Found {plural(result.total, 'file')} matching {pattern}{where}{shared}"
        if result.mode == "count":
            lines = plural(result.total_matches, "line")
            return f"Counted {lines} matching {pattern} in {plural(result.total, 'file')}{where}"
        lines = plural(result.matched_lines or result.total, "line")
        files = f" in {plural(result.files_matched, 'file')}" if result.files_matched else ""
        return f"Found {lines} matching {pattern}{files}{where}"


def _running_count(ctx: CallContext, mode: OutputMode) -> Callable[[int], None] | None:
    """Progress of the result lines as they stream, when someone listens."""
    if ctx.progress is None:
        return None
    if mode == "content":
        return _Throttled(ctx, "result line", "result lines")
    return _Throttled(ctx, "matching file", "matching files")


def _render(result: GrepResult) -> ToolOutput:
    if result.total == 0:
        return ToolOutput.text("No matches found")
    unit = "lines" if result.mode == "content" else "entries"
    out: list[str] = []
    if result.mode == "files_with_matches":
        noun = "file" if result.total == 1 else "files"
        out.append(f"Found {result.total} {noun}")
    if not result.lines:
        out.append(
            f"(No {unit} at offset {result.offset}: the result has only {result.total}. "
            "Use a smaller offset.)"
        )
    out.extend(result.lines)
    if result.mode == "count":
        files = "file" if result.total == 1 else "files"
        out.append(f"Total: {result.total_matches} matching lines in {result.total} {files}")
    shown_end = result.offset + len(result.lines)
    if result.lines and (result.offset > 0 or shown_end < result.total):
        more = (
            f" Use offset={shown_end} to see the next ones, or narrow the search."
            if shown_end < result.total
            else ""
        )
        out.append(f"(Showing {unit} {result.offset + 1}-{shown_end} of {result.total}.{more})")
    if result.capped:
        out.append("(The output was too large to keep in full; some lines are missing.)")
    if result.unsorted:
        out.append(
            f"(The last {result.unsorted} files follow in the order the search found them, not "
            "by modification time: looking at every file's time took longer than the call's time "
            "limit. Narrow the search to have them all sorted.)"
        )
    if result.warnings:
        out.append(f"(ripgrep reported errors for some files:\n{result.warnings})")
    # Over budget the head and the tail survive (the tail carries the paging note).
    return ToolOutput(content=[TextContent(text="\n".join(out))])
