"""Bash: run a shell command in a disposable container of the session's workspace.

The working directory carries over between calls (a `cd` persists) as long as it stays inside
the workspace; nothing else does, because every command gets a fresh container. A command run in
the background (or moved there at its timeout, when the policy allows) keeps its container until
it ends (daemon.tools.background).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar

from pydantic import Field, field_validator

from daemon.errors import ToolError, ToolInputError
from daemon.models import TextContent
from daemon.sessions.session import Session
from daemon.shell.bounded import parse_bounded
from daemon.shell.facts import command_facts, written_files
from daemon.shell.hidden import hidden_code
from daemon.shell.model import ParsedCommand
from daemon.shell.readonly import is_read_only
from daemon.shell.status import benign_meaning
from daemon.tools.contract import (
    CallContext,
    CallFacts,
    GrantPattern,
    InterruptBehavior,
    ProgressUpdate,
    SandboxRunner,
    Tool,
    ToolInput,
    ToolOutput,
    ToolTraits,
    TouchedPath,
)
from daemon.tools.schema import LaxInt
from daemon.tools.summaries import failed, one_line, seconds
from sandbox.backend import GIT_DIR_NAME, BashRequest, GitAccess, SandboxResult

#: What a program prints when a write fails with EDQUOT.
_QUOTA_EXCEEDED = "Disk quota exceeded"
_READ_ONLY_FS = "Read-only file system"
DEFAULT_TIMEOUT_MS = 120_000
MAX_TIMEOUT_MS = 600_000
#: Output the runner keeps in memory (head and tail); the rest is only counted.
OUTPUT_LIMIT_BYTES = 1 << 20
#: Bash's result budget: longer output keeps its beginning and its end.
RESULT_BUDGET_CHARS = 30_000


class BashInput(ToolInput):
    """Input of Bash."""

    command: str = Field(
        min_length=1, description="The command to run with bash (stdout and stderr merged)."
    )
    timeout: LaxInt | None = Field(
        default=None,
        gt=0,
        description=f"Timeout in milliseconds (default {DEFAULT_TIMEOUT_MS}, max "
        f"{MAX_TIMEOUT_MS}; larger values are lowered to the max, and the policy may set a "
        "lower ceiling).",
    )
    description: str | None = Field(
        default=None,
        description="What the command does in 5 to 10 words, shown to the person watching "
        "(e.g. 'Run the unit tests').",
    )
    run_in_background: bool = Field(
        default=False,
        description="Set to true to run this command in the background (when the policy "
        "allows it); read its output later with BashOutput, stop it with KillShell.",
    )

    @field_validator("timeout")
    @classmethod
    def _clamp_timeout(cls, value: int | None) -> int | None:
        # Models ask for more than the maximum often enough that clamping helps more than a
        # refusal that only costs them another turn.
        return None if value is None else min(value, MAX_TIMEOUT_MS)


@dataclass(frozen=True)
class BashRun:
    """A finished command, with what is needed to explain it."""

    result: SandboxResult
    timeout_ms: int
    """The timeout the command actually had."""
    policy_capped: bool
    """The policy's limit, not the requested timeout, set `timeout_ms`."""
    memory_mb: int
    """The memory limit the container had."""
    notes: tuple[str, ...] = ()
    """Extra lines for the model (e.g. the working directory was reset)."""
    cwd_reset: bool = False
    """The working directory went back to the workspace root (it had left the workspace)."""
    answer: str = ""
    """What a non-zero exit means when it is an answer, not a failure ("no match found")."""
    shell_id: str = ""
    """Set when the command goes on in the background (started there, or moved at its
    timeout): its ID for BashOutput and KillShell."""
    background_ms: int = 0
    """How long it may run in the background."""
    moved: bool = False
    """It was moved to the background at its timeout (rather than started there)."""
    refused_background: str = ""
    """Why a command that reached its timeout could not move to the background."""


class BashTool(Tool[BashInput, BashRun]):
    """Shell commands in the sandbox."""

    name: ClassVar[str] = "Bash"
    prepares_off_loop = True  # a long line waits for the parser's child process
    description: ClassVar[str] = (
        "Runs a bash command in a disposable, isolated container and returns its output "
        "(stdout and stderr merged).\n"
        "- The workspace is mounted at the same absolute path and is the only place where "
        "changes persist: every command gets a fresh container, so environment variables, "
        "background processes and files outside the workspace (e.g. /tmp) are gone afterwards. "
        "The working directory does carry over (a `cd` persists) while it stays inside the "
        "workspace; otherwise it is reset to the workspace root.\n"
        "- Network access is off unless the policy grants it.\n"
        f"- Limits: timeout is in milliseconds, default {DEFAULT_TIMEOUT_MS}, max "
        f"{MAX_TIMEOUT_MS} (the policy may set a lower ceiling); a command that runs past it is "
        "killed and you get the output so far. Output longer than about "
        f"{RESULT_BUDGET_CHARS} characters is cut to its beginning and end.\n"
        "- A non-zero exit status is reported as an error whose text starts with `Exit code N`, "
        "except where exit 1 is an answer: grep/rg finding no match, diff/cmp finding "
        "differences, test/[ being false, git diff --exit-code/--quiet finding changes (then "
        "the text says so and it is not an error).\n"
        "- run_in_background: true starts the command in the background (when the policy allows "
        "it) and answers at once with its ID; read its new output with BashOutput and stop it "
        "with KillShell. It has its own container, is killed when its lifetime (set by the "
        "policy) ends, and goes with the session. Do not append `&` to run something in the "
        "background: it would die with its container when the call ends.\n"
        "- Prefer the dedicated tools: Read instead of cat/head/tail, Edit/Write instead of "
        "sed/echo redirection, Glob or LS instead of find/ls, Grep instead of grep/rg. Quote "
        "paths that contain spaces. Chain dependent commands with && rather than newlines."
    )
    input_model: ClassVar[type[ToolInput]] = BashInput
    traits: ClassVar[ToolTraits] = ToolTraits(
        read_only=False,
        destructive=True,
        concurrency_safe=False,
        sandboxed=True,
        interrupt=InterruptBehavior.CANCEL,
        max_result_chars=RESULT_BUDGET_CHARS,
        cancels_siblings=True,
    )

    def validate(self, args: BashInput, session: Session) -> BashInput:
        if not args.command.strip():
            raise ToolInputError("command is blank: give the shell command to run.")
        if "\x00" in args.command:
            raise ToolInputError("command contains a NUL byte, which bash cannot run; remove it.")
        return args

    def analyse(self, args: BashInput, session: Session) -> CallFacts:
        line = parse_bounded(args.command, session.owner)
        cwd = session.cwd or session.workspace
        # A background command runs on while others change the disk, and beside one (or in a
        # workspace another session shares) the disk may change between this judgement and the
        # run: no path is known then.
        settled = not args.run_in_background and not session.disk_may_change()
        workspace = str(session.workspace)
        commands = command_facts(line, str(cwd), workspace, settled)
        directories = [str(cwd), *(command["cwd"] for command in commands)]
        return self.facts(
            # A line that only reads may run beside other safe calls (and a failure then
            # cancels them).
            concurrency_safe=is_read_only(line),
            paths=[TouchedPath.of(session.workspace, cwd, "write")],
            policy={
                "command": {
                    **line.to_policy(),
                    "cwd": str(cwd),
                    "simple_commands": commands,
                    "written_files": written_files(line, directories, workspace, settled),
                    "hidden_code": hidden_code(line),
                }
            },
            grant=_grant(line),
        )

    async def call(self, args: BashInput, ctx: CallContext) -> BashRun:
        runner = ctx.require_sandbox()
        notes: list[str] = []
        cwd = await _start_directory(ctx.session)
        if args.run_in_background:
            return _started_in_background(args, ctx, runner, cwd)
        requested = args.timeout or DEFAULT_TIMEOUT_MS
        timeout_ms = min(requested, ctx.limits.timeout_ms)
        request = BashRequest(
            command=args.command,
            cwd=str(cwd),
            timeout_ms=timeout_ms,
            output_limit_bytes=OUTPUT_LIMIT_BYTES,
            # A daemon that dies mid-call leaves nobody to read the answer: the command stops
            # with it rather than writing on for the rest of its timeout.
            stop_without_host=True,
        )
        run = BashRun(
            result=SandboxResult(),
            timeout_ms=timeout_ms,
            policy_capped=timeout_ms < requested,
            memory_mb=ctx.limits.memory_mb,
        )
        if _may_move(ctx, timeout_ms):
            run = await _run_movable(request, ctx, runner, run)
            if run.shell_id:
                return run
            result = run.result
        else:
            result = await runner.run(request, ctx.limits, _live_output(ctx))
        if result.cwd_reset:
            ctx.session.cwd = ctx.session.workspace
            notes.append(
                f"Shell cwd was reset to {ctx.session.workspace}: the sandbox may not enter "
                f"{result.cwd_reset} (another principal sharing the workspace may have made it "
                "theirs). Nothing ran; send the command again to run it from there."
            )
        await _follow_directory(ctx.session, result.final_cwd, notes)
        cwd_reset = bool(notes)  # every note so far is of a reset
        if ctx.session.disk_budget_mb and _QUOTA_EXCEEDED in result.output:
            notes.append(_quota_note(ctx.session))
        if (
            ctx.limits.git is GitAccess.READ_ONLY
            and _READ_ONLY_FS in result.output
            and GIT_DIR_NAME in result.output
        ):
            notes.append(
                f"[The repository's {GIT_DIR_NAME} is read-only in the sandbox: git can read it "
                "(status, diff, log) but not commit, stage, check out or configure. Leave those "
                "to the user, or ask the operator to grant git writes (the policy's sandbox.git).]"
            )
        finished = not (result.error or result.timed_out or result.oom_killed or result.cancelled)
        return replace(
            run,
            result=result,
            notes=tuple(notes),
            cwd_reset=cwd_reset,
            answer=benign_meaning(args.command, result.exit_code) if finished else "",
        )

    def summarize(self, args: BashInput, result: BashRun | None, output: ToolOutput) -> str:
        bash_run = result
        if bash_run is None:
            return failed(self.name, output)
        run = bash_run.result
        if bash_run.shell_id:
            return f"Ran `{one_line(args.command, 60)}` in the background as {bash_run.shell_id}"
        if run.error:
            return failed(self.name, output)
        took = seconds(run.duration_ms)
        if run.timed_out:
            outcome = f"timed out after {seconds(bash_run.timeout_ms)}"
        elif run.oom_killed:
            outcome = f"out of memory after {took}"
        elif run.cancelled:
            outcome = f"cancelled after {took}"
        else:
            outcome = f"exit {run.exit_code} after {took}"
        text = f"Ran `{one_line(args.command, 60)}`: {outcome}"
        return text + " (working directory reset)" if bash_run.cwd_reset else text

    def render(self, result: BashRun) -> ToolOutput:
        run = result.result
        output = run.output or "(no output)"
        is_error = True
        if result.shell_id:
            return ToolOutput.text(_background_text(result))
        if run.error:
            text = f"{run.error}\n{run.output}" if run.output else run.error
        elif run.timed_out:
            text = (
                f"Command timed out: it was killed after {result.timeout_ms} ms. "
                f"{_timeout_advice(result)}\nOutput before it was killed:\n{output}"
            )
            if result.refused_background:
                text += f"\n\n[It was not moved to the background: {result.refused_background}.]"
        elif run.oom_killed:
            text = (
                f"Command ran out of memory and was killed (limit {result.memory_mb} MB). Make it "
                f"use less memory (smaller input, fewer parallel jobs).\nOutput before it was "
                f"killed:\n{output}"
            )
        elif run.cancelled:
            text = f"Command was cancelled before it finished.\nOutput so far:\n{output}"
        elif result.answer:
            text, is_error = (
                f"Exit code {run.exit_code}: {result.answer} (not an error)\n{output}",
                False,
            )
        elif run.exit_code != 0:
            text = f"Exit code {run.exit_code}\n{output}"
        else:
            text, is_error = output, False
        notes = list(result.notes)
        if run.output_truncated:
            notes.insert(
                0,
                f"[Output truncated: the command produced {run.output_bytes} bytes; only the "
                "beginning and the end are shown. Redirect output to a file in the workspace and "
                "search it with Grep to see more.]",
            )
        if notes:
            text = text.rstrip("\n") + "\n\n" + "\n".join(notes)
        return ToolOutput(
            content=[TextContent(text=text)],
            is_error=is_error,
            exit_code=run.exit_code,
            timed_out=run.timed_out,
            oom_killed=run.oom_killed,
            sandbox_id=run.sandbox_id,
        )


def _grant(line: ParsedCommand) -> GrantPattern | None:
    """The program and its subcommand ("git push"): approving it for the session covers the same
    kind of command, never a different program. Only when every command of the line shares that
    prefix, and never a bare program name ("rm" would cover "rm -rf ~")."""
    commands = line.simple_commands
    if not line.parsed or not commands or len(commands[0].argv) < 2:
        return None
    words = tuple(commands[0].argv[:2])
    if words[1].startswith("-") or not all(words) or commands[0].wrappers:
        return None
    if any(tuple(c.argv[:2]) != words or c.wrappers for c in commands):
        return None
    return GrantPattern(" ".join(words), words)


def _quota_note(session: Session) -> str:
    """What a command that met a disk quota is told: its workspace's budget, or its owner's
    share of the filesystem all workspaces live on."""
    note = (
        f"[Writes failed with 'Disk quota exceeded': the workspace reached its disk budget of "
        f"{session.disk_budget_mb} MiB"
    )
    if session.disk_share_mb:
        note += (
            f", or this principal's workspaces together reached its share of "
            f"{session.disk_share_mb} MiB (those of closed sessions kept without "
            "delete_workspace count too)"
        )
    return note + (
        ". Delete files that are not needed, or write less; the operator sets these "
        "(workspaces.budget_mb, workspaces.principal_share).]"
    )


def _live_output(ctx: CallContext) -> Callable[[str], None] | None:
    """Passes output chunks on as progress while the command runs, when someone listens."""
    if ctx.progress is None:
        return None

    def report(chunk: str) -> None:
        ctx.report(ProgressUpdate(output=chunk))

    return report


def _started_in_background(
    args: BashInput, ctx: CallContext, runner: SandboxRunner, cwd: Path
) -> BashRun:
    shells = ctx.shells
    refused = (
        "the daemon keeps no background commands"
        if shells is None
        else shells.room(ctx.session.id, ctx.session.owner, ctx.background)
    )
    if shells is None or refused:
        raise ToolError(
            f"Cannot run this command in the background: {refused}. Run it in the foreground "
            "(without run_in_background) with a command that finishes within its timeout."
        )
    lifetime_ms = shells.lifetime_ms(ctx.background)
    request = BashRequest(
        command=args.command,
        cwd=str(cwd),
        timeout_ms=lifetime_ms,
        output_limit_bytes=OUTPUT_LIMIT_BYTES,
        stop_without_host=True,
    )
    shell = shells.launch(
        runner,
        request,
        ctx.limits,
        session_id=ctx.session.id,
        owner=ctx.session.owner,
        tool_use_id=ctx.tool_use_id,
        background=True,
    )
    ctx.session.goes_on(shell)
    return BashRun(
        result=SandboxResult(),
        timeout_ms=lifetime_ms,
        policy_capped=False,
        memory_mb=ctx.limits.memory_mb,
        shell_id=shell.id,
        background_ms=lifetime_ms,
    )


def _may_move(ctx: CallContext, timeout_ms: int) -> bool:
    """Whether a foreground command may go on in the background at its timeout."""
    grant, shells = ctx.background, ctx.shells
    return (
        shells is not None
        and grant.on_timeout
        and grant.shells > 0
        and shells.lifetime_ms(grant) > timeout_ms
    )


async def _run_movable(
    request: BashRequest, ctx: CallContext, runner: SandboxRunner, run: BashRun
) -> BashRun:
    """Run in the foreground until the timeout; then move to the background when there is
    room, else kill it there as a foreground command would have been."""
    shells = ctx.shells
    assert shells is not None  # _may_move
    lifetime_ms = shells.lifetime_ms(ctx.background)
    shell = shells.launch(
        runner,
        request.model_copy(update={"timeout_ms": lifetime_ms, "stop_without_host": True}),
        ctx.limits,
        session_id=ctx.session.id,
        owner=ctx.session.owner,
        tool_use_id=ctx.tool_use_id,
        on_output=_live_output(ctx),
        background=False,
    )
    try:
        ended = await shell.run_for(request.timeout_ms / 1000)
    except asyncio.CancelledError:
        await shells.discard(shell, "its call was interrupted")
        raise
    if ended and shell.result is not None:
        await shells.discard(shell, "")
        return replace(run, result=shell.result)
    refused = shells.adopt(shell, ctx.background)
    if refused:
        so_far, _ = shell.take()
        await shells.discard(shell, "its foreground timeout")
        killed = SandboxResult(exit_code=137, timed_out=True, output=so_far)
        return replace(run, result=killed, refused_background=refused)
    ctx.session.goes_on(shell)
    so_far, _ = shell.take()
    return replace(
        run,
        result=SandboxResult(output=so_far),
        shell_id=shell.id,
        background_ms=lifetime_ms - request.timeout_ms,
        moved=True,
    )


def _background_text(run: BashRun) -> str:
    minutes = (
        f"{run.background_ms / 60_000:.0f} min"
        if run.background_ms >= 60_000
        else (f"{run.background_ms / 1000:.0f} s")
    )
    if run.moved:
        return (
            f"Command was still running after {run.timeout_ms} ms, so it was moved to the "
            f"background with ID: {run.shell_id}. Read its new output with BashOutput (bash_id "
            f"{run.shell_id!r}); stop it with KillShell. It is killed if it runs another "
            f"{minutes}.\nOutput so far:\n{run.result.output or '(no output)'}"
        )
    return (
        f"Command running in background with ID: {run.shell_id}. Read its output with "
        f"BashOutput (bash_id {run.shell_id!r}); stop it with KillShell. It is killed if it "
        f"runs longer than {minutes}."
    )


def _timeout_advice(run: BashRun) -> str:
    if run.policy_capped:
        return (
            f"The policy allows at most {run.timeout_ms} ms per command: make the command finish "
            "sooner (smaller input, fewer steps) or split it into several calls."
        )
    if run.timeout_ms < MAX_TIMEOUT_MS:
        return (
            "Make the command finish sooner, or pass a larger timeout (at most "
            f"{MAX_TIMEOUT_MS} ms)."
        )
    return "Make the command finish sooner (smaller input, fewer steps) or split it up."


async def _start_directory(session: Session) -> Path:
    """The session's cwd while it is still a directory inside the workspace. When it is not,
    nothing runs (ToolError): the policy judged the command, its relative paths included, from
    there (attacker round 112: a cwd removed after it was judged sent `rm -rf ../<workspace>`
    to the workspace root, emptying it). The session's cwd is reset, so the next command is
    judged, and runs, at the root."""
    cwd = session.cwd
    if cwd is None or cwd == session.workspace:
        return session.workspace
    if await session.directory_inside(str(cwd)) == cwd:
        return cwd
    session.cwd = session.workspace
    raise ToolError(
        f"Shell cwd was reset to {session.workspace}: the working directory {cwd} is no longer "
        "a directory inside the workspace. Nothing ran; send the command again to run it from "
        "there."
    )


async def _follow_directory(session: Session, final_cwd: str, notes: list[str]) -> None:
    """Keep the directory the shell ended in, unless it lies outside the workspace."""
    if not final_cwd:
        return  # killed or failed before reporting: keep the previous directory
    # The workspace is mounted at its host path, so the container's path names the host path.
    resolved = await session.directory_inside(final_cwd)
    if resolved is not None:
        session.cwd = resolved
        return
    session.cwd = session.workspace
    notes.append(
        f"Shell cwd was reset to {session.workspace}: the command ended in {final_cwd}, which "
        "is outside the workspace."
    )
