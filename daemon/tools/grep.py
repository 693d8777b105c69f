"""Grep: search file contents of the workspace with ripgrep.

ripgrep runs on the host with a fixed argv (no shell, `--no-config`, the pattern after `--`), on a
path confined to the workspace. It never follows symlinks (its default), so it cannot be led out
of the workspace by one. File choice, documented for the model: hidden files are searched (except
`.git/`), ignore files (.gitignore inside a git repository, .ignore, .rgignore) are respected,
binary files are skipped. Content and count results are sorted by path so that `offset` pages
through a stable order; files_with_matches is sorted by modification time, newest first, like Glob.

Grep calls of one parallel group (an assistant turn) that search the same path with the same
glob, type and case rule in files_with_matches mode share one walk of the files
(daemon/tools/grep_shared.py); each still gets exactly the answer of a search of its own.

Progress for the person watching: the running count of matching files (or lines) every quarter
second, and at the end how many files ripgrep searched, from `--stats` in content and count modes
(there ripgrep reads whole files anyway; in files_with_matches mode the flag would stop it from
quitting a file at its first match, so that mode reports matching files only).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import ConfigDict, Field

from daemon.errors import ToolError, ToolInputError
from daemon.models import TextContent
from daemon.tools.child import Child
from daemon.tools.coerce import LaxInt, LaxToolInput
from daemon.tools.contract import (
    CallContext,
    InterruptBehavior,
    ProgressUpdate,
    Tool,
    ToolOutput,
    ToolTraits,
    TouchedPath,
)
from daemon.tools.grep_shared import files_per_pattern
from daemon.tools.summaries import failed, plural, quoted, result_of, shown_path, with_result
from daemon.workspace import is_inside, open_confined, require_inside

if TYPE_CHECKING:
    from daemon.session import Session

DEFAULT_HEAD_LIMIT = 250
"""Lines or entries shown when head_limit is not given."""
MAX_COLUMNS = 500
"""Longer matching lines are shown as a preview (minified files would flood the result)."""
MAX_KEPT_CHARS = 4 * 1024 * 1024
"""Output kept in memory at most; beyond it lines are counted, not stored."""
MAX_STDERR_BYTES = 8192
"""ripgrep's error output kept for the message."""
INLINE_STAT_PATHS = 64
"""Up to this many matching files are sorted by mtime on the event loop, more in a thread."""
PROGRESS_INTERVAL_S = 0.25
"""Running counts are reported at most this often."""
RESULT_BUDGET_CHARS = 20_000
"""Grep's result budget."""

# One line of ripgrep's --stats block ("12 matched lines", "40 files searched"...). Result lines
# never look like this: they start with the absolute path searched.
_STAT_LINE = re.compile(
    r"^(\d+)(?:\.\d+)? (matches|matched lines|files contained matches|files searched|"
    r"bytes printed|bytes searched|seconds spent searching|seconds)$"
)

OutputMode = Literal["content", "files_with_matches", "count"]


class GrepInput(LaxToolInput):
    """Input of Grep. Fields named like rg's flags use aliases ("-A", "-i", ...)."""

    model_config = ConfigDict(populate_by_name=True)

    pattern: str = Field(
        min_length=1,
        description="Regular expression to search for (Rust regex syntax, as ripgrep). Escape "
        r"literal characters such as ( ) [ ] { } . * + ? | with a backslash, e.g. 'interface\{\}'.",
    )
    path: str | None = Field(
        default=None,
        description="The file or directory to search: an absolute path inside the workspace. "
        'Omit the field to search the whole workspace (do not send "null" or "undefined").',
    )
    glob: str | None = Field(
        default=None,
        description='Only search files whose path matches this glob, e.g. "*.py" or '
        '"src/**/*.{ts,tsx}".',
    )
    file_type: str | None = Field(
        default=None,
        alias="type",
        description='Only search files of this ripgrep type, e.g. "py", "js", "rust", "go". '
        "More efficient than glob for standard types.",
    )
    output_mode: OutputMode = Field(
        default="files_with_matches",
        description='"files_with_matches" (default): paths of matching files, newest first; '
        '"content": matching lines (path:line:text); "count": matching lines per file.',
    )
    after: LaxInt | None = Field(
        default=None,
        alias="-A",
        ge=0,
        description="Lines to show after each match (content mode only).",
    )
    before: LaxInt | None = Field(
        default=None,
        alias="-B",
        ge=0,
        description="Lines to show before each match (content mode only).",
    )
    around: LaxInt | None = Field(
        default=None,
        alias="-C",
        ge=0,
        description="Lines to show before and after each match (content mode only).",
    )
    context: LaxInt | None = Field(
        default=None, ge=0, description='Same as "-C" (content mode only).'
    )
    line_numbers: bool | None = Field(
        default=None,
        alias="-n",
        description="Show line numbers (content mode only; default true).",
    )
    ignore_case: bool | None = Field(
        default=None, alias="-i", description="Match case-insensitively."
    )
    only_matching: bool | None = Field(
        default=None,
        alias="-o",
        description="Show only the matched part of each line (content mode only).",
    )
    head_limit: LaxInt | None = Field(
        default=None,
        ge=0,
        description=f"Show at most this many lines (content) or entries (default "
        f"{DEFAULT_HEAD_LIMIT}; 0 means no limit, though the result is still cut at about "
        f"{RESULT_BUDGET_CHARS} characters).",
    )
    offset: LaxInt | None = Field(
        default=None,
        ge=0,
        description="Skip this many lines or entries first (to page through a long result).",
    )
    multiline: bool | None = Field(
        default=None,
        description="Let the pattern span lines ('.' also matches newlines). Default false.",
    )


def _context_lines(args: GrepInput) -> int | None:
    if args.around is not None and args.context is not None and args.around != args.context:
        raise ToolInputError(
            f'"-C" ({args.around}) and context ({args.context}) mean the same thing but differ; '
            "give only one of them."
        )
    return args.around if args.around is not None else args.context


def scope_flags(args: GrepInput) -> list[str]:
    """ripgrep's flags for which files are searched and how lines match (not what is printed)."""
    flags = []
    if args.ignore_case:
        flags.append("--ignore-case")
    if args.multiline:
        flags += ["--multiline", "--multiline-dotall"]
    if args.glob:
        flags.append(f"--glob={args.glob}")
    # After the caller's glob, so that it wins over a broad one like "*".
    flags.append("--glob=!.git")
    if args.file_type:
        flags.append(f"--type={args.file_type}")
    return flags


def _threads_flag(threads: int | None) -> list[str]:
    return [] if threads is None else [f"--threads={threads}"]


def build_argv(
    rg: str, args: GrepInput, search_path: Path | str, threads: int | None = None
) -> list[str]:
    """The exact ripgrep command line (an argv list; no shell ever sees it); `threads` caps
    ripgrep's own parallelism (None: its default)."""
    argv = [
        rg,
        "--no-config",
        "--color=never",
        "--no-heading",
        "--with-filename",
        "--hidden",
        f"--max-columns={MAX_COLUMNS}",
        "--max-columns-preview",
    ]
    argv += _threads_flag(threads)
    argv += scope_flags(args)
    if args.output_mode == "files_with_matches":
        argv.append("--files-with-matches")
    elif args.output_mode == "count":
        argv += ["--count", "--sort=path", "--stats"]
    else:
        argv.append("--stats")
        # Sorting makes ripgrep single-threaded, but offset must page through a stable order.
        argv.append("--sort=path")
        argv.append("--no-line-number" if args.line_numbers is False else "--line-number")
        if args.after is not None:
            argv.append(f"--after-context={args.after}")
        if args.before is not None:
            argv.append(f"--before-context={args.before}")
        context = _context_lines(args)
        if context is not None:
            argv.append(f"--context={context}")
        if args.only_matching:
            argv.append("--only-matching")
    argv += ["--", args.pattern, str(search_path)]
    return argv


def _absolute(entry: str, shown_as: str) -> str:
    """A path ripgrep printed (it runs in the search root: "./...") made absolute again."""
    return shown_as + entry[1:] if entry.startswith("./") else entry


@dataclass
class _Collector:
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
            line = _absolute(line, self.shown_as)
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


async def _read_capped(child: Child, limit: int) -> bytes:
    kept = b""
    while chunk := await child.read(child.stderr):
        if len(kept) < limit:
            kept += chunk[: limit - len(kept)]
    return kept


async def _drain_lines(child: Child, collector: _Collector) -> None:
    pending = b""
    while chunk := await child.read(child.stdout):
        pending += chunk
        *complete, pending = pending.split(b"\n")
        for raw in complete:
            collector.feed(raw.decode("utf-8", errors="replace"))
    if pending:
        collector.feed(pending.decode("utf-8", errors="replace"))


async def run_rg(
    argv: list[str], root_fd: int, collector: _Collector, timeout_s: float
) -> tuple[int, str]:
    """Run ripgrep inside the already opened search root, feeding stdout to the collector;
    returns (exit code, stderr text).

    ripgrep starts in the directory behind `root_fd` (checked to be inside the workspace when it
    was opened) and searches relative paths, so swapping the search path for a symlink after the
    check cannot redirect it. The process is killed if the call is cancelled or runs past the
    timeout.
    """
    try:
        child = Child(argv, cwd=f"/proc/self/fd/{root_fd}", pass_fds=(root_fd,))
    except FileNotFoundError as exc:
        raise _rg_missing() from exc
    stderr_task = asyncio.create_task(_read_capped(child, MAX_STDERR_BYTES))
    try:
        async with asyncio.timeout(timeout_s):
            await _drain_lines(child, collector)
            code = await child.wait()
            stderr = await stderr_task
    except TimeoutError as exc:
        raise _timed_out(timeout_s) from exc
    finally:
        if not stderr_task.done():
            stderr_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await stderr_task
        await child.close()
    return code, stderr.decode("utf-8", errors="replace").strip()


class _RunningSearches:
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


_SEARCHES = _RunningSearches(len(os.sched_getaffinity(0)))
_RG_BY_PATH: dict[str, str] = {}


def _ripgrep() -> str:
    """The rg executable on PATH; a found one is remembered for that PATH (a miss is not, so
    installing ripgrep needs no restart)."""
    search = os.environ.get("PATH", os.defpath)
    found = _RG_BY_PATH.get(search) or shutil.which("rg", path=search)
    if found is None:
        raise _rg_missing()
    _RG_BY_PATH[search] = found
    return found


def _timed_out(timeout_s: float) -> ToolError:
    return ToolError(
        f"The search took longer than {timeout_s:g} s and was stopped. Narrow it with path, "
        "glob or type."
    )


def _rg_missing() -> ToolError:
    return ToolError(
        "Grep needs ripgrep (rg), which is not installed on the daemon's host. Search with Bash "
        "(grep -rn) instead, and tell the operator to install ripgrep."
    )


def _search_error(stderr: str) -> ToolError:
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


def open_search_root(workspace: Path, path: Path, raw: str) -> SearchRoot:
    """Open the search root, refusing a missing path, a FIFO or device (rg would hang or read
    forever), or anything that leads out of the workspace."""
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            return SearchRoot(open_confined(workspace, path, directory=True), ".", str(path))
        os.close(open_confined(workspace, path))
        parent = open_confined(workspace, path.parent, directory=True)
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


def _by_mtime(paths: list[str]) -> list[str]:
    def mtime(path: str) -> int:
        try:
            return os.stat(path).st_mtime_ns  # noqa: PTH116 - a Path per file costs more than the stat
        except OSError:
            return 0

    stamped = [(mtime(path), path) for path in paths]
    stamped.sort(key=lambda item: (-item[0], item[1]))
    return [path for _, path in stamped]


def _count_of(entry: str) -> int:
    _, _, number = entry.rpartition(":")
    return int(number) if number.isdigit() else 0


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
    if len(paths) <= INLINE_STAT_PATHS:
        ordered = _by_mtime(paths)
    else:
        ordered = await asyncio.to_thread(_by_mtime, paths)
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
        if args.path is not None:
            args.resolved("path")
        _context_lines(args)
        return args

    def _search_path(self, args: GrepInput, workspace: Path) -> Path:
        return args.resolved("path") if args.path is not None else workspace

    def touched_paths(self, args: GrepInput, session: Session) -> list[TouchedPath]:
        path = self._search_path(args, session.workspace)
        inside = is_inside(session.workspace, path)
        return [TouchedPath(path=path, access="read", inside_workspace=inside)]

    async def call(self, args: GrepInput, ctx: CallContext) -> GrepResult:
        raw = args.path if args.path is not None else str(ctx.workspace)
        path = require_inside(ctx.workspace, self._search_path(args, ctx.workspace), raw)
        rg = _ripgrep()
        if ctx.peers is not None:
            shared = await self._search_shared(rg, args, ctx, path, raw)
            if shared is not None:
                return shared
        # A few syscalls, like those validation already made on the event loop.
        root = open_search_root(ctx.workspace, path, raw)
        try:
            return await self._search(rg, args, ctx, root, path)
        finally:
            os.close(root.fd)

    async def _search_shared(
        self, rg: str, args: GrepInput, ctx: CallContext, path: Path, raw: str
    ) -> GrepResult | None:
        """This call's part of one walk shared with parallel siblings that search the same
        files the same way (daemon/tools/grep_shared.py); None: search alone."""
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
            root = open_search_root(ctx.workspace, path, raw)
            try:
                with _SEARCHES.share() as threads:
                    scope = [*_threads_flag(threads), *scope_flags(args)]
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
            raise _timed_out(timeout_s) from exc
        if found is None:
            return None
        paths = [_absolute(entry, root.shown_as) for entry in found[place]]
        return await _listing(
            args, ctx, paths, path, directory=root.target == ".", shared_with=len(found) - 1
        )

    async def _search(
        self, rg: str, args: GrepInput, ctx: CallContext, root: SearchRoot, path: Path
    ) -> GrepResult:
        offset = args.offset or 0
        head_limit = DEFAULT_HEAD_LIMIT if args.head_limit is None else args.head_limit
        keep = head_limit or None
        windowed = args.output_mode == "content"
        # files_with_matches is sorted by mtime and count sums all entries: keep them all.
        collector = _Collector(
            skip=offset if windowed else 0,
            keep=keep if windowed else None,
            read_stats=args.output_mode != "files_with_matches",
            progress=_running_count(ctx, args.output_mode),
            shown_as=root.shown_as,
        )
        with _SEARCHES.share() as threads:
            code, stderr = await run_rg(
                build_argv(rg, args, root.target, threads),
                root.fd,
                collector,
                ctx.limits.timeout_ms / 1000,
            )
        if code == 2 and collector.total == 0:
            raise _search_error(stderr)
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
        return with_result(_render(result), result)

    def summarize(self, args: GrepInput, output: ToolOutput) -> str:
        result = result_of(output, GrepResult)
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
    if result.warnings:
        out.append(f"(ripgrep reported errors for some files:\n{result.warnings})")
    # Over budget the head and the tail survive (the tail carries the paging note).
    return ToolOutput(content=[TextContent(text="\n".join(out))])
