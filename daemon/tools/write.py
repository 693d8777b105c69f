"""Write: create or overwrite a file, written atomically inside the sandbox.

This module also holds what the three file-changing tools share: reading the current file on the
host (confined to the workspace), and handing the new content to the sandbox with the hash the
file must still have, so a change made between the check and the write is caught by the runner.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from pydantic import Field

from daemon.errors import ToolError
from daemon.session import Session
from daemon.tools.coerce import LaxToolInput
from daemon.tools.contract import (
    CallContext,
    InterruptBehavior,
    SandboxRunner,
    Tool,
    ToolInput,
    ToolOutput,
    ToolTraits,
    TouchedPath,
)
from daemon.tools.read import MAX_FILE_BYTES
from daemon.tools.summaries import count_lines, failed, plural, result_of, shown_path, with_result
from daemon.workspace import is_inside, open_confined, require_inside, resolve_path
from sandbox.backend import SandboxResult, WriteFileRequest

#: Traits of Write, Edit and MultiEdit: they change files, one at a time, and finish an atomic
#: replace rather than stop halfway.
FILE_TOOL_TRAITS = ToolTraits(
    read_only=False,
    destructive=True,
    concurrency_safe=False,
    sandboxed=True,
    interrupt=InterruptBehavior.BLOCK,
    max_result_chars=100_000,
)

FILE_PATH_DESCRIPTION = "The file to change: an absolute path inside the workspace."
MAX_FILE_MB = MAX_FILE_BYTES >> 20
"""Existing files larger than this (in MB) are refused by the file tools."""


@dataclass(frozen=True)
class FileChange:
    """What a file tool did (or why its write failed)."""

    path: Path
    """Resolved path of the file."""
    created: bool
    """The file did not exist before."""
    sandbox_id: str = ""
    """Container that carried out the write."""
    error: str = ""
    """Set when the sandbox did not complete the write (the message says what the file holds)."""
    snippet: str = ""
    """Numbered lines around the change (Edit)."""
    replacements: int = 0
    """Occurrences replaced (Edit, MultiEdit)."""
    edits: int = 0
    """Edits applied (MultiEdit)."""
    shown: str = ""
    """The path as people read it (relative to the workspace), for the summary."""


def require_sandbox(ctx: CallContext) -> SandboxRunner:
    """The call's sandbox runner, or a ToolError when the daemon runs without one."""
    if ctx.sandbox is None:
        raise ToolError(
            "The sandbox is not available, so this tool cannot run: tooljail only changes files "
            "and runs commands inside a disposable container. Use the read-only tools (Read, "
            "Glob, Grep, LS), or ask the operator to start tooljail with a sandbox backend."
        )
    return ctx.sandbox


def target_path(raw: str) -> Path:
    """The resolved absolute path a file tool acts on (relative paths are refused)."""
    return resolve_path(raw, "file_path")


def file_touched(raw: str, session: Session) -> list[TouchedPath]:
    """The one path a file tool writes, as the policy sees it."""
    path = target_path(raw)
    return [
        TouchedPath(path=path, access="write", inside_workspace=is_inside(session.workspace, path))
    ]


async def read_current(workspace: Path, path: Path, raw: str) -> bytes | None:
    """The file's current bytes, read on the host through a confined descriptor; None if missing.

    `raw` is the path as the model wrote it, for the error when it leads outside the workspace.
    """
    require_inside(workspace, path, raw)
    return await asyncio.to_thread(_read_confined, workspace, path)


def _read_confined(workspace: Path, path: Path) -> bytes | None:
    if not os.path.lexists(path):
        _require_directory_ancestor(path)
        return None
    try:
        fd = open_confined(workspace, path)
    except FileNotFoundError:
        return None
    except IsADirectoryError as exc:
        raise ToolError(
            f"{path} is a directory, not a file. Give the path of a file (inside that directory "
            "if you meant to create one there)."
        ) from exc
    except PermissionError as exc:
        raise ToolError(f"{path} cannot be read to check it: permission denied.") from exc
    except OSError as exc:
        raise ToolError(f"{path} cannot be read to check it: {exc.strerror or exc}.") from exc
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise ToolError(
            f"{path} is larger than {MAX_FILE_BYTES} bytes, too large to change with this tool. "
            "Use the Bash tool (e.g. sed, or a script) to change it."
        )
    return data


async def write_file(
    ctx: CallContext, path: Path, content: str, expected_sha256: str | None
) -> FileChange:
    """Replace `path` with `content` in the sandbox and record what the session now knows."""
    runner = require_sandbox(ctx)
    request = WriteFileRequest(path=str(path), content=content, expected_sha256=expected_sha256)
    result = await runner.run(request, ctx.limits)
    created = expected_sha256 is None
    change = FileChange(
        path=path,
        created=created,
        sandbox_id=result.sandbox_id,
        error=_write_failure(path, result),
        shown=shown_path(path, ctx.workspace),
    )
    if not change.error:
        ctx.session.record_written(path, content.encode("utf-8"))
    return change


def render_change(change: FileChange, success: str) -> ToolOutput:
    """The tool_result of a file change: `success`, or the write's error as an is_error result."""
    output = ToolOutput.text(change.error or success, is_error=bool(change.error))
    output.sandbox_id = change.sandbox_id
    return with_result(output, change)


def succeeded(output: ToolOutput) -> FileChange | None:
    """The change a file tool made, None when the call failed (then summarize with `failed`)."""
    change = result_of(output, FileChange)
    return None if change is None or change.error else change


def _write_failure(path: Path, result: SandboxResult) -> str:
    if result.error:
        return f"Could not write {path}: {result.error}"
    # The runner replaces the file with a rename, so an interrupted write leaves either the old
    # or the new content, never a mix; the model is told to look rather than guess which.
    if result.timed_out:
        return (
            f"Writing {path} did not finish within the time limit and was stopped. The file holds "
            "either its old or its new content: Read it to check, then retry if needed."
        )
    if result.oom_killed:
        return f"Writing {path} ran out of memory in the sandbox; the file was not changed."
    if result.cancelled:
        return (
            f"Writing {path} was cancelled. The file holds either its old or its new content: "
            "Read it to check, then retry if needed."
        )
    if result.exit_code != 0:
        return (
            f"The sandbox could not write {path} (exit code {result.exit_code}); the file was "
            "not changed. Retry, or report the problem if it persists."
        )
    return ""


def _require_directory_ancestor(path: Path) -> None:
    """A file can only be created below directories (missing ones are created)."""
    for parent in path.parents:
        if os.path.lexists(parent):
            if not parent.is_dir():
                raise ToolError(
                    f"Cannot create {path}: {parent} is a file, not a directory. Choose a path "
                    "whose parent is a directory."
                )
            return


class WriteInput(LaxToolInput):
    """Input of Write."""

    file_path: str = Field(
        description="The file to create or overwrite: an absolute path inside the workspace."
    )
    content: str = Field(description="The complete new content of the file (replaces all of it).")


def directory_grant(file_path: str) -> tuple[str, tuple[str, ...]]:
    """A session-scoped approval of a file change covers its directory (and below)."""
    return str(Path(file_path).parent).rstrip("/") + "/", ()


class WriteTool(Tool[WriteInput, FileChange]):
    """Create a file, or overwrite one that was Read in this session."""

    name: ClassVar[str] = "Write"
    description: ClassVar[str] = (
        "Writes a file to the workspace: creates it (with any missing parent directories) or "
        "replaces its whole content.\n"
        "- file_path must be an absolute path inside the workspace.\n"
        "- Overwriting an existing file requires that you Read it earlier in this session and "
        "that it has not changed since; otherwise the call fails and asks you to Read it (again).\n"
        "- To change part of an existing file, prefer Edit (or MultiEdit): it sends only the "
        "change and cannot drop content by accident. Use Write for new files or complete "
        "rewrites.\n"
        f"- Limit: an existing file over {MAX_FILE_MB} MB cannot be replaced with Write (use "
        "Bash).\n"
        "- The write happens inside a sandbox and is atomic: the file is never left half "
        "written."
    )
    input_model: ClassVar[type[ToolInput]] = WriteInput
    traits: ClassVar[ToolTraits] = FILE_TOOL_TRAITS

    def validate(self, args: WriteInput, session: Session) -> WriteInput:
        target_path(args.file_path)
        return args

    def grant_pattern(self, args: WriteInput) -> tuple[str, tuple[str, ...]] | None:
        return directory_grant(args.file_path)

    def touched_paths(self, args: WriteInput, session: Session) -> list[TouchedPath]:
        return file_touched(args.file_path, session)

    async def call(self, args: WriteInput, ctx: CallContext) -> FileChange:
        require_sandbox(ctx)
        path = target_path(args.file_path)
        current = await read_current(ctx.workspace, path, args.file_path)
        expected = None if current is None else ctx.session.require_fresh(path, current, self.name)
        return await write_file(ctx, path, args.content, expected)

    def render(self, result: FileChange) -> ToolOutput:
        if result.created:
            return render_change(result, f"File created successfully at: {result.path}")
        return render_change(result, f"The file {result.path} has been updated.")

    def summarize(self, args: WriteInput, output: ToolOutput) -> str:
        change = succeeded(output)
        if change is None:
            return failed(self.name, output)
        text = f"Wrote {plural(count_lines(args.content), 'line')} to {change.shown}"
        return text + " (new file)" if change.created else text
