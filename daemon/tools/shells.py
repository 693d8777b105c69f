"""BashOutput and KillShell: read and stop the session's background commands (Bash with
`run_in_background`), as the reference runtime does.

BashOutput answers in the reference's shape: `<status>`, `<exit_code>` once it ended, the new
output in `<stdout>` (stdout and stderr are merged, as in Bash), `<timestamp>`. Its `filter` is a
regular expression run by ripgrep, whose engine takes time linear in the input whatever the
pattern: a model-written regex cannot stall the daemon.
"""

from __future__ import annotations

import asyncio
import datetime
import weakref
from dataclasses import dataclass
from typing import ClassVar

from pydantic import Field

from daemon.errors import ToolError
from daemon.host.child import run_child
from daemon.host.landlock import confined_to_its_input
from daemon.host.turns import PrincipalTurns
from daemon.tools.background import BackgroundShell, BackgroundShells, ShellState
from daemon.tools.contract import (
    CallContext,
    InterruptBehavior,
    Tool,
    ToolInput,
    ToolOutput,
    ToolTraits,
)
from daemon.tools.grep.ripgrep import find_ripgrep
from daemon.tools.summaries import one_line

FILTER_TIMEOUT_S = 10.0
FILTER_MAX_CHARS = 1_000
FILTERS_AT_ONCE = 2
"""ripgrep processes filtering at once, over all calls (each may take a core for its timeout),
one per principal (attacker round 143: one tenant's filters could hold both, again and again)."""
FILTER_MEMORY_MB = 256
"""What one filter may map (its input is at most what a shell keeps unread)."""
_FILTERING: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, PrincipalTurns] = (
    weakref.WeakKeyDictionary()
)


class BashOutputInput(ToolInput):
    """Input of BashOutput."""

    bash_id: str = Field(
        min_length=1,
        max_length=100,
        description="The ID of the background command to read (Bash's answer gave it).",
    )
    filter: str | None = Field(
        default=None,
        max_length=FILTER_MAX_CHARS,
        description="Optional regular expression (Rust syntax, as Grep's): only the new output "
        "lines that match it are shown. The other new lines are discarded and will not be shown "
        "again.",
    )


class KillShellInput(ToolInput):
    """Input of KillShell."""

    shell_id: str = Field(
        min_length=1, max_length=100, description="The ID of the background command to stop."
    )


@dataclass(frozen=True)
class ShellRead:
    """What one BashOutput read found."""

    shell: BackgroundShell
    state: ShellState
    output: str
    dropped_chars: int
    filtered_out: int = 0
    """New lines the filter discarded."""


def _shells(ctx: CallContext) -> BackgroundShells:
    if ctx.shells is None:
        raise ToolError(
            "This daemon runs no background commands (it has no sandbox), so there is nothing "
            "to read or stop."
        )
    return ctx.shells


class BashOutputTool(Tool[BashOutputInput, ShellRead]):
    """New output of a background command."""

    name: ClassVar[str] = "BashOutput"
    description: ClassVar[str] = (
        "Retrieves output from a running or completed background bash command.\n"
        "- Takes the bash_id that Bash gave when it started the command in the background.\n"
        "- Returns only the output produced since the last read, with the command's status "
        "(running, completed, failed, killed, timed_out) and, once it ended, its exit code.\n"
        "- filter (a regular expression) keeps only the matching new lines; the others are "
        "discarded.\n"
        "- Output not read in time is bounded: the oldest unread output is dropped first, and "
        "the answer says how much."
    )
    input_model: ClassVar[type[ToolInput]] = BashOutputInput
    traits: ClassVar[ToolTraits] = ToolTraits(
        read_only=True,
        destructive=False,
        concurrency_safe=True,
        sandboxed=True,
        interrupt=InterruptBehavior.CANCEL,
        max_result_chars=30_000,
    )

    async def call(self, args: BashOutputInput, ctx: CallContext) -> ShellRead:
        shell = _shells(ctx).find(ctx.session.id, args.bash_id)
        # The state first: output that arrives after it belongs to the next read.
        state = shell.state
        text, dropped = shell.take()
        if args.filter is None or not text:
            return ShellRead(shell, state, text, dropped)
        try:
            kept = await _matching_lines(text, args.filter, ctx.session.owner)
        except BaseException:
            shell.put_back(text, dropped)  # a failed read consumes nothing
            raise
        total = text.count("\n") + (not text.endswith("\n"))
        return ShellRead(shell, state, kept, dropped, total - kept.count("\n"))

    def summarize(self, args: BashOutputInput, result: ShellRead | None, output: ToolOutput) -> str:
        if result is None:
            return f"BashOutput of {one_line(args.bash_id, 30)} failed"
        return f"Read {result.shell.id} ({result.state.value}): {len(result.output)} characters"

    def render(self, result: ShellRead) -> ToolOutput:
        shell = result.shell
        parts = [f"<status>{result.state.value}</status>"]
        if result.state is not ShellState.RUNNING and shell.result is not None:
            parts.append(f"<exit_code>{shell.result.exit_code}</exit_code>")
            if shell.result.error:
                parts.append(f"<error>{shell.result.error}</error>")
            if shell.result.oom_killed:
                parts.append("<error>it ran out of memory and was killed</error>")
            if result.state is ShellState.TIMED_OUT:
                parts.append(
                    f"<error>it reached its lifetime of {shell.timeout_ms} ms and was "
                    "killed</error>"
                )
            if shell.killed_by:
                parts.append(f"<killed_by>{shell.killed_by}</killed_by>")
        notes = []
        if result.dropped_chars:
            notes.append(
                f"[{result.dropped_chars} characters of earlier output were dropped unread: read "
                "more often, or have the command write to a file in the workspace.]"
            )
        if result.filtered_out:
            notes.append(f"[{result.filtered_out} new lines did not match the filter.]")
        body = "\n".join([*notes, result.output.rstrip("\n")]).strip("\n")
        if body:
            parts.append(f"<stdout>\n{body}\n</stdout>")
        now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        parts.append(f"<timestamp>{now}</timestamp>")
        return ToolOutput.text("\n\n".join(parts))


class KillShellTool(Tool[KillShellInput, BackgroundShell]):
    """Stops a background command."""

    name: ClassVar[str] = "KillShell"
    description: ClassVar[str] = (
        "Kills a running background bash command by its ID (Bash gave it; BashOutput reads it). "
        "Its container is removed with everything the command was doing; the workspace keeps "
        "what it wrote there. Use it for commands that are no longer needed."
    )
    input_model: ClassVar[type[ToolInput]] = KillShellInput
    traits: ClassVar[ToolTraits] = ToolTraits(
        read_only=False,
        destructive=True,
        concurrency_safe=False,
        sandboxed=True,
        interrupt=InterruptBehavior.BLOCK,
        max_result_chars=2_000,
    )

    async def call(self, args: KillShellInput, ctx: CallContext) -> BackgroundShell:
        shells = _shells(ctx)
        shell = shells.find(ctx.session.id, args.shell_id)
        if shell.done:
            raise ToolError(
                f"Background command {shell.id} already ended ({shell.state.value}); there is "
                "nothing to kill. Read what it left with BashOutput."
            )
        return await shells.kill(ctx.session.id, shell.id)

    def summarize(
        self, args: KillShellInput, result: BackgroundShell | None, output: ToolOutput
    ) -> str:
        if result is None:
            return f"KillShell {one_line(args.shell_id, 30)} failed"
        return f"Killed {result.id}"

    def render(self, result: BackgroundShell) -> ToolOutput:
        return ToolOutput.text(
            f"Successfully killed shell: {result.id} ({one_line(result.command, 200)})"
        )


async def _matching_lines(text: str, pattern: str, principal: str) -> str:
    """The lines of `text` that match `pattern`, by ripgrep in `principal`'s turn (ToolError: a
    bad pattern)."""
    loop = asyncio.get_running_loop()
    turns = _FILTERING.setdefault(loop, PrincipalTurns(FILTERS_AT_ONCE))
    async with turns.turn(principal):
        return await _filtered(text, pattern)


async def _filtered(text: str, pattern: str) -> str:
    rg = await confined_to_its_input(find_ripgrep(), memory_mb=FILTER_MEMORY_MB)
    data = text.encode("utf-8", "surrogateescape")
    # run_child, as every host program: it closes the daemon's descriptors in the child, which
    # reads bytes a sandbox wrote, whatever loop runs (attacker round 164: on uvloop's,
    # asyncio's subprocess API ignored close_fds and the filter got the daemon's descriptors).
    finished = await run_child(
        [
            *rg,
            "--no-config",
            "--color=never",
            "--no-line-number",
            "--text",
            # Small compiled automata: a pattern built to blow them up is refused, not run.
            "--regex-size-limit=2M",
            "--dfa-size-limit=2M",
            "-e",
            pattern,
            "-",
        ],
        input_data=data,
        timeout_s=FILTER_TIMEOUT_S,
        output_cap=len(data) + 1,  # the lines that match: never more than the input
    )
    if finished.timed_out:
        raise ToolError(
            f"The filter took longer than {FILTER_TIMEOUT_S:g} s; use a simpler pattern."
        )
    if finished.exit_code not in (0, 1, 2):
        message = finished.stderr.text().strip()[:2000] or f"exit {finished.exit_code}"
        raise ToolError(
            f"The filter could not run ({message}); no output was consumed. Read without a "
            "filter, or with a simpler one, and tell the operator if this persists."
        )
    if finished.exit_code == 2:
        message = finished.stderr.text().strip()[:2000]
        raise ToolError(
            f"The filter is not a valid regular expression:\n{message}\nFix it (Rust regex "
            "syntax: escape literal ( ) [ ] { } . * + ? | with a backslash) and read again; no "
            "output was consumed."
        )
    return finished.stdout.text()
