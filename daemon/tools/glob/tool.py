"""Glob: find files of the workspace by name pattern, newest first (the walk is in
`daemon.tools.glob.engine`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from pydantic import Field

from daemon.host.confine import require_inside
from daemon.models import TextContent
from daemon.tools.contract import (
    CallContext,
    CallFacts,
    InterruptBehavior,
    ProgressUpdate,
    Tool,
    ToolInput,
    ToolOutput,
    ToolTraits,
    TouchedPath,
)
from daemon.tools.glob.engine import (
    MAX_RESULTS,
    MAX_SCANNED,
    GlobResult,
    ScanCounter,
    glob_files,
    plan_glob,
)
from daemon.tools.summaries import failed, plural, quoted, shown_path

if TYPE_CHECKING:
    from daemon.sessions.session import Session


class GlobInput(ToolInput):
    """Input of Glob."""

    pattern: str = Field(
        min_length=1,
        # Longer can never match a path (PATH_MAX), and compiling it would stall the daemon.
        max_length=4096,
        description='Glob pattern matched against file paths relative to path, e.g. "**/*.py" or '
        '"src/**/*.{ts,tsx}".',
    )
    path: str | None = Field(
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
        f"there are more (narrow the pattern or path); the walk stops after {MAX_SCANNED} "
        "directory entries.\n"
        "- To search file contents, use Grep. Several Glob calls can run in parallel."
    )
    input_model = GlobInput
    traits = ToolTraits(
        read_only=True,
        destructive=False,
        concurrency_safe=True,
        sandboxed=False,
        interrupt=InterruptBehavior.CANCEL,
        max_result_chars=100_000,
    )

    def analyse(self, args: GlobInput, session: Session) -> CallFacts:
        base = plan_glob(args.pattern, args.path, session.workspace).base
        return self.facts(paths=[TouchedPath.of(session.workspace, base, "read", "path")])

    async def call(self, args: GlobInput, ctx: CallContext) -> GlobResult:
        # The patterns compiled again (cheap); the directory is the one the policy decided on.
        plan = replace(
            plan_glob(args.pattern, args.path, ctx.workspace), base=ctx.facts.path("path")
        )
        require_inside(ctx.workspace, plan.base, plan.raw_base)
        counter = ScanCounter(report=_progress_from_thread(ctx))
        result = await asyncio.to_thread(glob_files, ctx.session.pinned_root(), plan, counter)
        ctx.report(ProgressUpdate(files_scanned=result.scanned))
        return replace(result, shown=shown_path(plan.base, ctx.workspace, directory=True))

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
        if result.scan_stopped:
            text += f" (stopped after {MAX_SCANNED} entries)"
        return text


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
        text = "No files found"
        if result.scan_stopped:
            text += (
                f" (the search stopped after {MAX_SCANNED} directory entries; give a narrower path)"
            )
        return ToolOutput.text(text)
    lines = list(result.files)
    if result.total > len(result.files):
        lines.append(
            f"(Showing the {len(result.files)} most recently modified of {result.total} "
            "matching files. Narrow the pattern or the path to see the others.)"
        )
    if result.scan_stopped:
        lines.append(
            f"(The search stopped after {MAX_SCANNED} directory entries, so some matches may "
            "be missing. Give a narrower path.)"
        )
    return ToolOutput(content=[TextContent(text="\n".join(lines))], keep="head")
