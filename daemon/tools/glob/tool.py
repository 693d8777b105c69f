"""Glob: find files of the workspace by name pattern, newest first (the walk is in
`daemon.tools.glob.engine`)."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from pydantic import Field

from daemon.host.confine import require_inside
from daemon.host.threads import FILESYSTEM_THREADS
from daemon.models import TextContent
from daemon.tools.contract import (
    CallContext,
    CallFacts,
    InterruptBehavior,
    ProgressUpdate,
    Tool,
    ToolInput,
    ToolOutput,
    ToolPath,
    ToolTraits,
    TouchedPath,
)
from daemon.tools.glob.engine import (
    MAX_RESULTS,
    MAX_SCANNED,
    GlobResult,
    Stop,
    Walk,
    glob_files,
    plan_glob,
)
from daemon.tools.summaries import failed, plural, quoted, shown_path

if TYPE_CHECKING:
    from daemon.sessions.session import Session

log = logging.getLogger(__name__)

DEADLINE_S = 20.0
"""How long one Glob may walk (the call's sandbox time limit, when shorter, wins)."""
STUCK_GRACE_S = 1.0
"""How long past its deadline the call waits for a walk that does not stop (stuck in the kernel
on a hung mount) before it answers with what was found so far."""


class GlobInput(ToolInput):
    """Input of Glob."""

    pattern: str = Field(
        min_length=1,
        # Longer can never match a path (PATH_MAX), and compiling it would stall the daemon.
        max_length=4096,
        description='Glob pattern matched against file paths relative to path, e.g. "**/*.py" or '
        '"src/**/*.{ts,tsx}".',
    )
    path: ToolPath | None = Field(
        default=None,
        description="The directory to search: an absolute path inside the workspace. Omit the "
        'field to search the whole workspace (do not send "null" or "undefined").',
    )


class GlobTool(Tool[GlobInput, GlobResult]):
    """Find files by glob pattern."""

    name = "Glob"
    description = (
        "Finds files by name with a glob pattern and lists their absolute paths, most recently "
        "modified first.\n"
        "- Supports `*` and `?` (within one path segment), `[abc]`, `**` (any number of "
        'directories) and `{a,b}` alternatives, e.g. "**/*.py", "src/**/test_*.{js,ts}". The '
        "pattern is matched against paths relative to path (default: the workspace root); an "
        "absolute pattern inside the workspace also works.\n"
        "- Only files are listed, not directories (use LS for those). Names starting with a dot "
        'match only when the pattern spells the dot (".github/**/*.yml", "**/.env*"); symbolic '
        "links to directories are not followed.\n"
        f"- Limits: at most {MAX_RESULTS} files are shown, with a note giving the total when "
        f"there are more (narrow the pattern or path); the search stops after {MAX_SCANNED} "
        f"directory entries or {DEADLINE_S:g} seconds, with a note, keeping what it found.\n"
        "- To search file contents, use Grep. Several Glob calls can run in parallel."
    )
    input_model = GlobInput
    audit_paths = frozenset({"pattern"})
    traits = ToolTraits(
        read_only=True,
        destructive=False,
        concurrency_safe=True,
        sandboxed=False,
        interrupt=InterruptBehavior.CANCEL,
        max_result_chars=100_000,
    )

    def __init__(
        self,
        *,
        deadline_s: float = DEADLINE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`deadline_s`: how long one call may walk; `clock`: what the walk's deadline is
        measured on (tests move it)."""
        self._deadline_s = deadline_s
        self._clock = clock

    def analyse(self, args: GlobInput, session: Session) -> CallFacts:
        base = plan_glob(args.pattern, args.path, session.workspace, session.root).base
        return self.facts(paths=[TouchedPath.of(session.workspace, base, "read", "path")])

    async def call(self, args: GlobInput, ctx: CallContext) -> GlobResult:
        # The patterns compiled again (cheap); the directory is the one the policy decided on.
        root = ctx.session.pinned_root()
        plan = plan_glob(args.pattern, args.path, ctx.workspace, root, ctx.facts.path("path"))
        require_inside(ctx.workspace, plan.base, plan.raw_base)
        deadline_s = min(self._deadline_s, ctx.limits.timeout_ms / 1000)
        walk = Walk(
            deadline=self._clock() + deadline_s,
            clock=self._clock,
            report=_progress_from_thread(ctx),
        )
        # In one of the session owner's threads, never on the event loop: a walk stuck on a hung
        # mount, or on a directory a process stuck in the kernel holds (attacker round 94: a
        # killed rename waiting on an ext4 truncate held the workspace's directory for seconds,
        # and a first slice of the walk listing it on the event loop froze every caller), holds
        # only that owner's (daemon.host.threads).
        walking = FILESYSTEM_THREADS.run(
            ctx.session.owner, functools.partial(glob_files, root, plan, walk)
        )
        result = await _wait(walking, walk, deadline_s)
        ctx.report(ProgressUpdate(files_scanned=result.scanned))
        shown = shown_path(plan.base, ctx.workspace, directory=True)
        return replace(result, shown=shown, deadline_s=deadline_s)

    def render(self, result: GlobResult) -> ToolOutput:
        return _render(result)

    def summarize(self, args: GlobInput, result: GlobResult | None, output: ToolOutput) -> str:
        if result is None:
            return failed(self.name, output)
        where = f" in {result.shown}" if args.path is not None and result.shown else ""
        text = f"Glob {quoted(args.pattern, 50)}{where}: "
        text += plural(result.total, "file") if result.total else "no files"
        if result.total > len(result.files):
            text += f" ({len(result.files)} shown)"
        if result.stopped is Stop.BUDGET:
            text += f" (stopped after {MAX_SCANNED} entries)"
        elif result.stopped is Stop.DEADLINE:
            text += f" (stopped at the {result.deadline_s:g} s time limit)"
        return text


async def _wait(walking: Awaitable[GlobResult], walk: Walk, deadline_s: float) -> GlobResult:
    """The walk's result. Cancelled, the walk is told to stop and left to end on its own (at its
    next entry); past its deadline and a grace, a walk that has not ended (stuck in the kernel)
    is answered for with what it found so far."""
    try:
        async with asyncio.timeout(deadline_s + STUCK_GRACE_S):
            return await walking
    except TimeoutError:
        walk.stop(Stop.DEADLINE)
        log.warning(
            "a Glob walk did not stop at its deadline (%g s); answered with what it found so far",
            deadline_s,
        )
        return walk.result()
    except asyncio.CancelledError:
        walk.stop(Stop.CANCELLED)
        raise


def _progress_from_thread(ctx: CallContext) -> Callable[[int], None] | None:
    """A report function the walking thread can call: it hands over to the event loop."""
    if ctx.progress is None:
        return None
    loop = asyncio.get_running_loop()

    def report(scanned: int) -> None:
        loop.call_soon_threadsafe(ctx.report, ProgressUpdate(files_scanned=scanned))

    return report


def _render(result: GlobResult) -> ToolOutput:
    if not result.files:
        if result.stopped is Stop.BUDGET:
            return ToolOutput.text(
                f"No files found (the search stopped after {MAX_SCANNED} directory entries; "
                "give a narrower path)"
            )
        if result.stopped is Stop.DEADLINE:
            return ToolOutput.text(
                f"No files found (the search stopped at its time limit of {result.deadline_s:g} "
                "s; give a narrower path or pattern)"
            )
        return ToolOutput.text("No files found")
    lines = list(result.files)
    if result.total > len(result.files):
        lines.append(
            f"(Showing the {len(result.files)} most recently modified of {result.total} "
            "matching files. Narrow the pattern or the path to see the others.)"
        )
    if result.stopped is Stop.BUDGET:
        lines.append(
            f"(The search stopped after {MAX_SCANNED} directory entries, so some matches may "
            "be missing. Give a narrower path.)"
        )
    elif result.stopped is Stop.DEADLINE:
        lines.append(
            f"(The search stopped at its time limit of {result.deadline_s:g} s, so some matches "
            "may be missing. Give a narrower path or pattern.)"
        )
    return ToolOutput(content=[TextContent(text="\n".join(lines))], keep="head")
