"""What the three file-changing tools (Write, Edit, MultiEdit) share: their traits and facts,
reading the current file on the host (confined to the workspace), and handing the new content to
the sandbox with the hash the file must still have, so a change made between the check and the
write is caught by the runner."""

from __future__ import annotations

import asyncio
import functools
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from daemon.errors import ConfinementError, ToolError
from daemon.host.confine import (
    is_inside,
    mode_beneath,
    open_confined,
    require_inside,
    resolve_path,
)
from daemon.host.pinned import PinnedDirectory
from daemon.host.threads import FILESYSTEM_THREADS
from daemon.sessions.session import Session, file_sha256
from daemon.tools.contract import (
    AnyTool,
    CallContext,
    CallFacts,
    GrantPattern,
    InterruptBehavior,
    ToolOutput,
    ToolTraits,
    TouchedPath,
)
from daemon.tools.read import INLINE_READ_BYTES, MAX_FILE_BYTES
from daemon.tools.summaries import shown_path
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


def file_facts(tool: AnyTool, raw: str, session: Session, field: str = "file_path") -> CallFacts:
    """A file tool's call: it writes the one file in `field` (resolved; relative paths are
    refused), and approving it for the session covers that file's directory and below."""
    path = resolve_path(raw, field, session.root)
    return tool.facts(
        paths=[TouchedPath.of(session.workspace, path, "write", field)],
        grant=GrantPattern(str(path.parent).rstrip("/") + "/"),
    )


async def read_current(session: Session, path: Path, raw: str) -> bytes | None:
    """The file's current bytes, read on the host through a confined descriptor, in one of the
    session owner's threads; None if missing.

    `raw` is the path as the model wrote it, for the error when it leads outside the workspace.
    """
    root = session.pinned_root()
    require_inside(root.path, path, raw)
    return await FILESYSTEM_THREADS.run(
        session.owner, functools.partial(_read_confined, root, path)
    )


def _read_confined(root: PinnedDirectory, path: Path) -> bytes | None:
    try:
        fd = open_confined(root, path)
    except FileNotFoundError:
        _require_directory_ancestor(root, path)
        return None
    except ConfinementError as exc:
        if isinstance(exc.__cause__, NotADirectoryError):
            _require_directory_ancestor(root, path)  # a file on the way: says which
        raise
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
        # Sized by fstat: a buffer of the limit would be allocated for every small file.
        chunks = [handle.read(min(os.fstat(fd).st_size, MAX_FILE_BYTES) + 1)]
        total = len(chunks[0])
        while total <= MAX_FILE_BYTES and (chunk := handle.read(1 << 20)):  # it grew meanwhile
            chunks.append(chunk)
            total += len(chunk)
    data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    if len(data) > MAX_FILE_BYTES:
        raise ToolError(
            f"{path} is larger than {MAX_FILE_BYTES} bytes, too large to change with this tool. "
            "Use the Bash tool (e.g. sed, or a script) to change it."
        )
    return data


async def _sha256_of(data: bytes) -> str | None:
    """The digest of megabytes, computed in a worker thread; None for small data (the caller
    hashes it where it is, cheaper than a thread)."""
    return await asyncio.to_thread(file_sha256, data) if len(data) > INLINE_READ_BYTES else None


async def require_fresh(ctx: CallContext, path: Path, current: bytes, tool: str) -> str:
    """Session.require_fresh, a large file hashed off the event loop (only once it was Read)."""
    digest = await _sha256_of(current) if path in ctx.session.reads else None
    return ctx.session.require_fresh(path, current, tool, digest)


async def write_file(
    ctx: CallContext, path: Path, content: str, expected_sha256: str | None
) -> FileChange:
    """Replace `path` with `content` in the sandbox and record what the session now knows."""
    runner = ctx.require_sandbox()
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
        data = content.encode("utf-8")
        ctx.session.record_written(path, data, await _sha256_of(data))
    return change


def render_change(change: FileChange, success: str) -> ToolOutput:
    """The tool_result of a file change: `success`, or the write's error as an is_error result."""
    output = ToolOutput.text(change.error or success, is_error=bool(change.error))
    output.sandbox_id = change.sandbox_id
    return output


def succeeded(change: FileChange | None) -> FileChange | None:
    """The change a file tool made, None when the call failed (then summarize with `failed`)."""
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


def _require_directory_ancestor(root: PinnedDirectory, path: Path) -> None:
    """A file can only be created below directories (missing ones are created). Each is looked
    at beneath the pinned workspace, never by its host path (`mode_beneath`)."""
    for parent in path.parents:
        if parent == root.path or not is_inside(root.path, parent):
            return
        mode = mode_beneath(root, parent)
        if mode is not None:
            if not stat.S_ISDIR(mode):
                raise ToolError(
                    f"Cannot create {path}: {parent} is a file, not a directory. Choose a path "
                    "whose parent is a directory."
                )
            return
