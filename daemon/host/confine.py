"""Workspace confinement: every path a host-side tool touches must stay inside the workspace.

Paths are checked twice: once when the call is validated (resolved, for the policy), and again at
open time on the file descriptor itself, so a symlink swapped in after validation cannot redirect a
read outside the workspace.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from daemon.errors import ConfinementError, ToolInputError


def resolve_path(raw: str, field: str = "file_path") -> Path:
    """Resolve an absolute path as far as it exists (symlinks followed); refuse relative paths."""
    if not raw:
        raise ToolInputError(f"{field} is empty: give an absolute path inside the workspace.")
    if "\x00" in raw:
        raise ToolInputError(f"{field} contains a NUL byte, which no file path may contain.")
    path = Path(raw)
    if not path.is_absolute():
        raise ToolInputError(
            f"{field} must be an absolute path, got {raw!r}: prefix it with the workspace "
            "directory."
        )
    try:
        return Path(os.path.realpath(path))
    except OSError as exc:  # a component changed between two steps of the resolution
        raise ToolInputError(
            f"{field} {raw!r} changed while it was being resolved ({exc.strerror}); retry."
        ) from exc


def is_inside(workspace: Path, path: Path) -> bool:
    """True when `path` (resolved) is the workspace or below it."""
    # On the strings: the same answer as `workspace in path.parents` for absolute paths, without
    # building every parent (this runs several times per call).
    root, target = str(workspace), str(path)
    if target == root or root == "/":
        return target.startswith("/")
    return target.startswith(root + "/")


def require_inside(workspace: Path, path: Path, raw: str | None = None) -> Path:
    """Return `path` if it is inside the workspace, else raise ConfinementError."""
    if not is_inside(workspace, path):
        shown = raw if raw is not None else str(path)
        via = f" (it resolves to {path})" if raw is not None and raw != str(path) else ""
        raise ConfinementError(
            f"{shown} is outside the workspace {workspace}{via}; only paths inside the workspace "
            "can be used."
        )
    return path


def _fd_path(fd: int) -> Path:
    return Path(f"/proc/self/fd/{fd}").readlink()


def open_confined(workspace: Path, path: Path, *, directory: bool = False) -> int:
    """Open a resolved path read-only and prove, on the descriptor, that it is inside the workspace.

    Refuses symlinks at the last component (O_NOFOLLOW), FIFOs and devices (O_NONBLOCK so opening
    them cannot hang), and anything whose descriptor's real path lies outside the workspace.
    Returns the descriptor; the caller closes it.
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    if directory:
        flags |= os.O_DIRECTORY
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except NotADirectoryError as exc:
        raise ConfinementError(f"{path} is not a directory.") from exc
    except IsADirectoryError:
        raise
    except OSError as exc:
        if exc.errno == 40:  # ELOOP: the last component became a symlink after validation
            raise ConfinementError(
                f"{path} is a symbolic link that changed after it was checked; refusing to "
                "follow it."
            ) from exc
        raise
    try:
        real = _fd_path(fd)
        if not is_inside(workspace, real):
            raise ConfinementError(
                f"{path} leads outside the workspace {workspace} (to {real}); refusing to read it."
            )
        mode = os.fstat(fd).st_mode
        if directory:
            if not stat.S_ISDIR(mode):
                raise ConfinementError(f"{path} is not a directory.")
        elif stat.S_ISDIR(mode):
            raise IsADirectoryError(path)
        elif not stat.S_ISREG(mode):
            raise ConfinementError(
                f"{path} is not a regular file (a device, FIFO or socket); such files cannot be "
                "read."
            )
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd
