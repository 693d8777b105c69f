"""Workspace confinement: every path a host-side tool touches must stay inside the workspace.

Paths are checked twice: once when the call is validated (resolved, for the policy, as strings),
and again when the file is opened, by the kernel, relative to the session's pinned workspace
descriptor (`daemon.host.pinned`), so nothing swapped in after validation can redirect a read.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from daemon.errors import ConfinementError, ToolInputError
from daemon.host.pinned import PinnedDirectory


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


def open_confined(root: PinnedDirectory, path: Path, *, directory: bool = False) -> int:
    """Open a resolved path read-only beneath the pinned workspace `root`.

    The kernel resolves it from the pinned directory's descriptor and refuses to leave it or to
    follow any symbolic link (PinnedDirectory.open_beneath), so neither a symlink nor a rename
    swapped in after validation can redirect the read. FIFOs and devices are refused (opened
    O_NONBLOCK, so opening them cannot hang). Returns the descriptor; the caller closes it.
    """
    require_inside(root.path, path)
    relative = str(path)[len(str(root.path)) :].lstrip("/")
    flags = os.O_RDONLY | os.O_NONBLOCK | (os.O_DIRECTORY if directory else 0)
    try:
        fd = root.open_beneath(relative, flags)
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        raise
    except NotADirectoryError as exc:
        raise ConfinementError(f"{path} is not a directory.") from exc
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ConfinementError(
                f"{path} is, or goes through, a symbolic link that changed after it was checked; "
                "refusing to follow it."
            ) from exc
        if exc.errno == errno.EXDEV:
            raise ConfinementError(
                f"{path} leads outside the workspace {root.path}; refusing to read it."
            ) from exc
        raise
    try:
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
