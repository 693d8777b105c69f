"""Which paths of a workspace hold its repository, for the sandbox to mount read-only over
themselves (the policy's `sandbox.git: read_only`).

The repository is what the owner's git on the host reads when run at the workspace's root:
`.git` (a directory, or a file naming the directory git uses), the directory such a file names
when it lies inside the workspace, and the common directory that one names in turn (a linked
worktree's). A directory deeper than the root's children also gets each directory on its way
pinned (mounted over itself, writable): a mount point cannot be renamed, so no ancestor can be
moved aside and replaced with one holding another repository.

Everything is looked at through the pinned workspace, never following a symbolic link (the
kernel's RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS); what cannot be looked at that way is refused,
not guessed: a `.git` that is a link, a named directory reached through one, or one that does
not exist (the model could make it).
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat

from daemon.errors import ToolError
from daemon.host.pinned import PinnedDirectory
from sandbox.backend import GIT_DIR_NAME, PathPin

GIT_FILE_MAX_BYTES = 4096
"""A `.git` file or `commondir` longer than this is not one git wrote."""
_GITDIR_PREFIX = "gitdir: "


def git_pins(root: PinnedDirectory) -> tuple[PathPin, ...]:
    """The pins that keep the workspace's repository read-only; () when it has no `.git` (a
    repository made in the sandbox is the model's own).

    Raises:
        ToolError: Part of the repository is a link, missing, or cannot be looked at: nothing
            may run, since the sandbox could not hold it read-only.
    """
    info = _lstat(root, GIT_DIR_NAME)
    if info is None:
        return ()
    pins = [_pin(root, GIT_DIR_NAME, info, read_only=True)]
    if stat.S_ISDIR(info.st_mode):
        return tuple(pins)
    if not stat.S_ISREG(info.st_mode):
        raise _refused(
            f"The workspace's {GIT_DIR_NAME} is a symbolic link (or neither a directory nor a "
            "file), and the sandbox keeps a repository read-only only where it is."
        )
    git_dir = _named_inside(root, _read(root, GIT_DIR_NAME), "", GIT_DIR_NAME)
    if git_dir is None:
        return tuple(pins)
    pins += _pins_to(root, git_dir)
    common = _named_inside(root, _read(root, f"{git_dir}/commondir"), git_dir, "commondir")
    if common is not None and common != git_dir:
        pins += _pins_to(root, common)
    return tuple(dict.fromkeys(pins))


def _named_inside(root: PinnedDirectory, text: str | None, base: str, what: str) -> str | None:
    """The workspace-relative directory a `.git` file or `commondir` names (relative to `base`),
    or None when it names nothing or a place outside the workspace (not in any container)."""
    if text is None:
        return None
    if what == GIT_DIR_NAME:
        if not text.startswith(_GITDIR_PREFIX):
            return None  # not a git file: git refuses it too
        text = text[len(_GITDIR_PREFIX) :]
    named = text.rstrip("\r\n\t ")
    if not named or "\0" in named:
        return None
    where = posixpath.normpath(
        named if posixpath.isabs(named) else posixpath.join(str(root.path), base, named)
    )
    inside = posixpath.relpath(where, str(root.path))
    if inside == "." or inside.startswith("../") or inside == "..":
        return None
    return inside


def _pins_to(root: PinnedDirectory, relative: str) -> list[PathPin]:
    """Each directory on the way to `relative` pinned writable, `relative` itself read-only."""
    parts = relative.split("/")
    pins = []
    for depth in range(1, len(parts) + 1):
        here = "/".join(parts[:depth])
        info = _lstat(root, here)
        if info is None or not stat.S_ISDIR(info.st_mode):
            what = (
                "missing (the model could make it)"
                if info is None
                else "a symbolic link"
                if stat.S_ISLNK(info.st_mode)
                else "not a directory"
            )
            raise _refused(
                f"The workspace's {GIT_DIR_NAME} names its repository at {relative}, and "
                f"{here} is {what}."
            )
        pins.append(_pin(root, here, info, read_only=depth == len(parts)))
    return pins


def _pin(root: PinnedDirectory, relative: str, info: os.stat_result, *, read_only: bool) -> PathPin:
    return PathPin(
        path=str(root.path / relative), identity=(info.st_dev, info.st_ino), read_only=read_only
    )


def _lstat(root: PinnedDirectory, relative: str) -> os.stat_result | None:
    """What `relative` is, reached without a link (None: it does not exist)."""
    parent, _, name = relative.rpartition("/")
    try:
        fd = root.open_beneath(parent, os.O_PATH | os.O_DIRECTORY)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _refused(_why(relative, exc)) from exc
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _refused(_why(relative, exc)) from exc
    finally:
        os.close(fd)


def _read(root: PinnedDirectory, relative: str) -> str | None:
    """A small text file of the repository (None: it does not exist)."""
    try:
        fd = root.open_beneath(relative, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _refused(_why(relative, exc)) from exc
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _refused(f"The workspace's {relative} is not a regular file.")
        data = os.read(fd, GIT_FILE_MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > GIT_FILE_MAX_BYTES:
        raise _refused(f"The workspace's {relative} is larger than git ever writes one.")
    return data.decode("utf-8", "replace")


def _why(relative: str, exc: OSError) -> str:
    if exc.errno in (errno.ELOOP, errno.EXDEV):
        return f"The workspace's {relative} is reached through a symbolic link."
    return f"The workspace's {relative} cannot be looked at ({exc.strerror})."


def _refused(why: str) -> ToolError:
    return ToolError(
        f"{why} The sandbox keeps the workspace's repository read-only, and cannot do so here, "
        f"so nothing ran. Ask the user to fix {GIT_DIR_NAME}, or to have the policy grant git "
        "writes (sandbox.git: writable)."
    )
