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
from daemon.host.loop_safe import NeedsThread, on_event_loop
from daemon.host.pinned import PinnedDirectory
from sandbox.openat2 import (
    AT_FDCWD,
    RESOLVE_BENEATH,
    RESOLVE_CACHED,
    RESOLVE_NO_MAGICLINKS,
    RESOLVE_NO_SYMLINKS,
    RESOLVE_NO_XDEV,
    openat2,
)

_ON_LOOP = RESOLVE_BENEATH | RESOLVE_NO_XDEV | RESOLVE_NO_MAGICLINKS | RESOLVE_CACHED
"""How the event loop looks a path up beneath a workspace: in the kernel's caches, on the
workspace's own mount, never outside it (daemon.host.loop_safe)."""


def resolve_path(raw: str, field: str = "file_path", within: PinnedDirectory | None = None) -> Path:
    """Resolve an absolute path as far as it exists (symlinks followed); refuse relative paths.

    On the event loop the kernel resolves it beneath the pinned workspace `within`, from its
    caches alone (`resolve_on_loop`); NeedsThread where that cannot answer (nothing may be
    looked up on the event loop without `within`), and the caller resolves it in a thread.
    """
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
    if on_event_loop():
        if within is None:
            raise NeedsThread(raw)
        return resolve_on_loop(within, path)
    try:
        if within is not None:
            return realpath_within(path, within.path)
        return Path(os.path.realpath(path))
    except PathNotKnown as exc:
        raise ToolInputError(
            f"{field} {raw!r} cannot be resolved: {exc.strerror}; give the path it leads to"
        ) from exc
    except OSError as exc:  # a link that cannot be read, or a name changed meanwhile
        raise ToolInputError(
            f"{field} {raw!r} cannot be resolved: a name on its way may be a symbolic link "
            f"the daemon cannot read, or changed meanwhile ({exc.strerror}); give the path "
            "the link leads to, or retry."
        ) from exc


def resolve_on_loop(root: PinnedDirectory, path: Path) -> Path:
    """What os.path.realpath(path) gives, for a path inside `root` that the kernel resolves
    from its caches on the workspace's own mount; NeedsThread for anything else (`..`, a link
    out of the workspace or onto another mount, a lookup that needs the filesystem). The answer
    is the kernel's name for what it opened (/proc/self/fd), not a string worked out here."""
    text, base = str(path), str(root.path)
    if ".." in path.parts or text.startswith("//"):
        raise NeedsThread(text)  # realpath resolves what precedes `..` first
    if text == base:
        relative = "."
    elif is_inside(root.path, path):
        relative = text[len(base) :].lstrip("/")
    else:
        raise NeedsThread(text)  # maybe a link from outside into the workspace
    try:
        fd = openat2(root.fd, relative, os.O_PATH, _ON_LOOP)
    except OSError as exc:
        if exc.errno == errno.ENOENT and relative != ".":
            return _missing_on_loop(root, relative)
        raise NeedsThread(text) from exc
    try:
        named = os.readlink(f"/proc/self/fd/{fd}")  # noqa: PTH115 - a Path would cost more
    finally:
        os.close(fd)
    found = Path(named)
    if named.endswith(" (deleted)") or str(found) != named or not is_inside(root.path, found):
        raise NeedsThread(text)  # unlinked meanwhile, or named outside: let realpath answer
    return found


MAX_LINKS = 40
"""Symbolic links one resolution follows at most (the kernel's own limit)."""
_NOT_A_LINK = frozenset({errno.EINVAL, errno.ENOENT, errno.ENOTDIR})
"""What readlink says of a name that is no link (or not there: the rest is as written)."""


def realpath_within(path: Path, workspace: Path) -> Path:
    """os.path.realpath(path) for as long as the path stays in `workspace` (or on its way
    there): a link is followed only from inside it, and a path that has left it is taken as
    written from there on, never looked at. The daemon may be root: resolving further told a
    caller where links in folders it may not read lead, and, through /proc/self/fd, the files
    the daemon holds open, other sessions' workspaces among them (attacker round 77). What
    leaves the workspace is refused whatever it leads to. OSError when a name in the workspace
    may be a link that cannot be read (EACCES, EIO): where the path leads is not known."""
    pending = [part for part in str(path).split("/") if part not in ("", ".")]
    pending.reverse()
    resolved = "/"
    # Each name is looked at in the folder found before it, held open (None: that name was
    # missing or no folder, and nothing below it is looked at): a folder swapped for a link
    # after it was found is never gone through by its path (attacker round 116).
    folder: int | None = _folder_at("/")
    links = 0
    try:
        while pending:
            name = pending.pop()
            if name == "..":
                resolved = os.path.dirname(resolved)  # noqa: PTH120 - text, as realpath does
                folder = _replaced(folder, _folder_at(resolved))
                continue
            candidate = os.path.join(resolved, name)  # noqa: PTH118 - text, as realpath does
            if not (is_inside(workspace, Path(candidate)) or is_inside(Path(candidate), workspace)):
                return _as_written(candidate, pending)
            target = None if folder is None else _link_text(name, folder)
            if target is None:
                resolved = candidate  # not a link (or gone: the rest is taken as written)
                folder = _replaced(folder, None if folder is None else _folder_at(name, folder))
                continue
            links += 1
            if links > MAX_LINKS:  # a loop: as realpath does, the rest is taken as written
                return _as_written(candidate, pending)
            if target.startswith("/"):
                resolved = "/"
                folder = _replaced(folder, _folder_at("/"))
            pending.extend(reversed([part for part in target.split("/") if part not in ("", ".")]))
        return Path(resolved)
    finally:
        _replaced(folder, None)


_FOLDER = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _folder_at(path: str, at: int = AT_FDCWD) -> int | None:
    """The folder at `path` (from the folder open at `at`), reached with no link on the way;
    None when there is none. OSError when a link stands there now (swapped in since it was
    looked at): where the path leads is not known."""
    try:
        return openat2(at, path, _FOLDER, RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise PathNotKnown(
                errno.ELOOP, "a symbolic link appeared on it while it was looked at", path
            ) from exc
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return None
        raise


def _link_text(name: str, folder: int) -> str | None:
    """The text of the link `name` in `folder`; None when it is no link or not there. OSError
    when it may be a link that cannot be read."""
    try:
        return os.readlink(name, dir_fd=folder)
    except OSError as exc:
        if exc.errno not in _NOT_A_LINK:
            raise
        return None


def _replaced(old: int | None, new: int | None) -> int | None:
    """`new`, once `old` is closed."""
    if old is not None:
        os.close(old)
    return new


class PathNotKnown(OSError):
    """Where a path leads cannot be told without following names the daemon does not follow."""


def _as_written(candidate: str, pending: list[str]) -> Path:
    """`candidate` and the names still `pending` (reversed) as written, where nothing is
    followed any more. A `..` there is refused (PathNotKnown), never taken away with the name
    before it: that name may be a link, to somewhere else again in a container (its
    /proc/self/cwd is the command's directory), and `/proc/self/cwd/../../../<workspace>/S`
    read as `<workspace>/S` let a command delete the workspace the policy took for a
    subfolder (attacker round 78)."""
    if ".." in pending:
        raise PathNotKnown(
            errno.EXDEV,
            "it goes back up (`..`) after it left the workspace, where links are not followed",
            candidate,
        )
    return Path("/".join([candidate.rstrip("/"), *reversed(pending)]))


def _missing_on_loop(root: PinnedDirectory, relative: str) -> Path:
    """realpath of a path that does not exist: when no link is on its way (the kernel found
    each existing directory, none a link, and the rest missing), the path as written."""
    try:
        os.close(openat2(root.fd, relative, os.O_PATH, _ON_LOOP | RESOLVE_NO_SYMLINKS))
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return root.path / relative
        raise NeedsThread(relative) from exc
    raise NeedsThread(relative)  # it exists now: it changed meanwhile


def existing_directory(root: PinnedDirectory, raw: str, *, on_loop: bool) -> Path | None:
    """`raw` resolved (links followed) when it names a directory inside the pinned workspace
    `root`, else None. `on_loop`: as the event loop may (NeedsThread otherwise)."""
    if "\x00" in raw or not raw.startswith("/"):
        return None
    path = Path(raw)
    try:
        resolved = resolve_on_loop(root, path) if on_loop else realpath_within(path, root.path)
    except OSError:
        return None
    if not is_inside(root.path, resolved):
        return None
    relative = str(resolved)[len(str(root.path)) :].lstrip("/")
    flags = os.O_PATH | os.O_DIRECTORY
    try:
        os.close(root.open_beneath(relative, flags, same_mount=on_loop, cached=on_loop))
    except OSError as exc:
        if on_loop and exc.errno in (errno.EAGAIN, errno.EXDEV):
            raise NeedsThread(raw) from exc
        return None
    return resolved


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


def open_confined(
    root: PinnedDirectory, path: Path, *, directory: bool = False, on_loop: bool = False
) -> int:
    """Open a resolved path read-only beneath the pinned workspace `root`.

    The kernel resolves it from the pinned directory's descriptor and refuses to leave it or to
    follow any symbolic link (PinnedDirectory.open_beneath), so neither a symlink nor a rename
    swapped in after validation can redirect the read. FIFOs and devices are refused (opened
    O_NONBLOCK, so opening them cannot hang). Returns the descriptor; the caller closes it.

    `on_loop`: for the event loop, on a local workspace, from the kernel's caches and on the
    workspace's own mount only; NeedsThread otherwise (daemon.host.loop_safe).
    """
    require_inside(root.path, path)
    if on_loop and not root.local:
        raise NeedsThread(str(path))
    flags = os.O_RDONLY | os.O_NONBLOCK | (os.O_DIRECTORY if directory else 0)
    try:
        fd = root.open_beneath(_beneath(root, path), flags, same_mount=on_loop, cached=on_loop)
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        raise
    except NotADirectoryError as exc:
        raise ConfinementError(f"{path} is not a directory.") from exc
    except OSError as exc:
        if on_loop and exc.errno in (errno.EAGAIN, errno.EXDEV):
            raise NeedsThread(str(path)) from exc  # there, the thread tells which it is
        raise _refusal(root, path, exc) from exc
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


def mode_beneath(root: PinnedDirectory, path: Path) -> int | None:
    """The st_mode of what the resolved `path` names beneath the pinned workspace `root`, looked
    up by the kernel from the pinned descriptor, never through a symbolic link (nor at one:
    ConfinementError); None when nothing is there, or it cannot be looked at. Never the host
    path itself: a folder swapped for a link since the call was judged would have the daemon
    (root, often) say what lies beyond it (attacker round 115 listed /root that way). Blocking:
    call it in a thread."""
    require_inside(root.path, path)
    try:
        fd = root.open_beneath(_beneath(root, path), os.O_PATH)
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return None
    except OSError as exc:
        raise _refusal(root, path, exc) from exc
    try:
        return os.fstat(fd).st_mode
    finally:
        os.close(fd)


def _beneath(root: PinnedDirectory, path: Path) -> str:
    return str(path)[len(str(root.path)) :].lstrip("/")


def _refusal(root: PinnedDirectory, path: Path, exc: OSError) -> Exception:
    """What a lookup beneath `root` that met a link, or left, is reported as."""
    if exc.errno == errno.ELOOP:
        return ConfinementError(
            f"{path} is, or goes through, a symbolic link that changed after it was checked; "
            "refusing to follow it."
        )
    if exc.errno == errno.EXDEV:
        return ConfinementError(
            f"{path} leads outside the workspace {root.path}; refusing to read it."
        )
    return exc
