"""Which paths of a workspace hold its repository, for the sandbox to mount read-only over
themselves (the policy's `sandbox.git: read_only`).

The repository is what the owner's git on the host reads when run at the workspace's root:
- `.git` (a directory, or a file naming the directory git uses), the directory such a file names
  when it lies inside the workspace, and the common directory that one names in turn (a linked
  worktree's);
- each submodule the index records, since `git status` at the root runs git in every one that
  has a `.git`: a checked-out submodule's `.git` (and the directory it names, when outside the
  repository already held), and an empty submodule's directory itself, read-only, so that no
  `.git` can be put there; recursively, through each submodule's own index.
A pinned directory deeper than the root's children gets each directory on its way pinned too
(mounted over itself, writable): a mount point cannot be renamed, so no ancestor can be moved
aside and replaced with one holding another repository.

Everything is looked at through the pinned workspace, never following a symbolic link (the
kernel's RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS); what cannot be looked at that way is refused,
not guessed: a `.git` that is a link, a named directory reached through one, or one that does
not exist (the model could make it), an index that does not parse, a submodule whose directory
is missing. A git directory outside the workspace (a linked worktree's) is in no container and
is not pinned, but its index and configuration are read for its submodules, once it has shown
that it belongs to this work tree: its `gitdir` file (a linked worktree's) or its
`core.worktree` (a submodule's, a separate git directory's) names it back. Until then a `.git`
file could be the model's, naming any host path, so nothing there is told apart: whether missing,
a link, another user's or another tenant's repository, the refusal is the same. Only files of the
workspace's owner are read outside, reached without any symbolic link.

An index is parsed by one thread at a time (a parse holds the interpreter: several at once would
starve the event loop), and what parsing found is kept, within a budget, until the file changes.
"""

from __future__ import annotations

import errno
import os
import posixpath
import re
import stat
import threading
from pathlib import Path

from daemon.errors import ToolError
from daemon.host.git_index import GitIndex, UnreadableIndex, read_index
from daemon.host.pinned import (
    AT_FDCWD,
    RESOLVE_NO_MAGICLINKS,
    RESOLVE_NO_SYMLINKS,
    PinnedDirectory,
    openat2,
)
from sandbox.backend import GIT_DIR_NAME, PathPin

GIT_FILE_MAX_BYTES = 4096
"""A `.git` file or `commondir` longer than this is not one git wrote."""
CONFIG_MAX_BYTES = 1 << 20
INDEX_MAX_BYTES = 64 << 20
"""About 800,000 files' worth (read whole, once per change, in about half a second); a larger
index is refused."""
MAX_PINS = 256
"""Past this many pinned paths (submodules), the repository is refused, not half held."""
MAX_SUBMODULE_DEPTH = 8
_GITDIR_PREFIX = "gitdir: "
_SHA256 = re.compile(r"(?im)^\s*objectformat\s*=\s*sha256\s*$")

_WORKTREE = re.compile(r"^\s*worktree\s*=\s*(.*?)\s*$", re.IGNORECASE)
_SECTION = re.compile(r"^\s*\[\s*([^\]\s]+)[^\]]*\]")
INDEX_CACHE_BYTES = 16 << 20
"""What the submodule paths of cached indexes may take, at most."""

_IndexKey = tuple[int, int, int, int]


class _IndexCache:
    """Parsed indexes by (device, inode, size, mtime): an index changes only when git writes it.
    The oldest go first once the paths kept pass `INDEX_CACHE_BYTES`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: dict[_IndexKey, tuple[GitIndex, int]] = {}
        self._bytes = 0

    def get(self, key: _IndexKey) -> GitIndex | None:
        with self._lock:
            found = self._kept.get(key)
        return None if found is None else found[0]

    def put(self, key: _IndexKey, index: GitIndex) -> None:
        cost = 64 + sum(64 + len(link) for link in index.gitlinks)
        with self._lock:
            if key in self._kept or cost > INDEX_CACHE_BYTES:
                return
            while self._kept and self._bytes + cost > INDEX_CACHE_BYTES:
                self._bytes -= self._kept.pop(next(iter(self._kept)))[1]
            self._kept[key] = (index, cost)
            self._bytes += cost


_index_cache = _IndexCache()
_parse_lock = threading.Lock()


def git_pins(root: PinnedDirectory) -> tuple[PathPin, ...]:
    """The pins that keep the workspace's repository read-only; () when it has no `.git` (a
    repository made in the sandbox is the model's own).

    Raises:
        ToolError: Part of the repository is a link, missing, or cannot be read: nothing may
            run, since the sandbox could not hold it read-only.
    """
    pins = _Pins(root)
    pins.repository("", depth=0)
    return pins.done()


class _Pins:
    """The pins found so far, by path (a path pinned read-only stays so)."""

    def __init__(self, root: PinnedDirectory) -> None:
        self._root = root
        self._pins: dict[str, PathPin] = {}
        self._read_only_dirs: list[str] = []
        """Workspace-relative directories already held read-only as a whole."""

    def done(self) -> tuple[PathPin, ...]:
        return tuple(self._pins.values())

    def repository(self, work_tree: str, *, depth: int) -> None:
        """Hold the repository whose work tree is `work_tree` ("" for the workspace's root)."""
        dot_git = _join(work_tree, GIT_DIR_NAME)
        info = _lstat(self._root, dot_git)
        if info is None:
            if work_tree:  # an empty submodule: nothing may become its .git
                self._add_way(work_tree, read_only=True)
            return
        if work_tree:
            self._add_way(work_tree, read_only=False)
        if stat.S_ISDIR(info.st_mode):
            self._add(dot_git, info, read_only=True)
            self._submodules(work_tree, dot_git, depth)
            return
        if not stat.S_ISREG(info.st_mode):
            raise _refused(
                f"The workspace's {dot_git} is a symbolic link (or neither a directory nor a "
                "file), and the sandbox keeps a repository read-only only where it is."
            )
        self._add(dot_git, info, read_only=True)
        git_dir = _named(self._root, self._read(dot_git), work_tree, gitfile=True)
        if git_dir is None:
            return
        if git_dir.startswith("/") and not self._names_back(git_dir, work_tree, info):
            raise _refused(_NOT_BACK.format(what=_name(dot_git)))
        self._hold(git_dir)
        common = self._common_dir(git_dir)
        if common is not None:
            self._hold(common)
        self._submodules(work_tree, git_dir, depth)

    def _names_back(self, git_dir: str, work_tree: str, dot_git: os.stat_result) -> bool:
        """Whether the git directory outside, `git_dir`, is this work tree's: its `gitdir` file
        names the work tree's `.git`, or its `core.worktree` the work tree. False too when
        anything on the way cannot be read: why is not told (it would tell what the host
        holds)."""
        try:
            back = self._read(_join(git_dir, "gitdir"))
            if back is not None:
                return _is(posixpath.join(git_dir, back.strip()), dot_git)
            config = self._read(_join(git_dir, "config"), CONFIG_MAX_BYTES)
            named = _core_worktree(config or "")
            tree = _lstat(self._root, work_tree) if work_tree else os.fstat(self._root.fd)
            return (
                named is not None and tree is not None and _is(posixpath.join(git_dir, named), tree)
            )
        except ToolError:
            return False

    def _common_dir(self, git_dir: str) -> str | None:
        """The directory `git_dir/commondir` names (a linked worktree's main git directory).
        One outside the workspace is taken only as the one a linked worktree's git directory
        lies in (`<common>/worktrees/<name>`): any git directory could be the model's (one
        outside in a workspace of another of its sessions), naming any host path."""
        common = _named(self._root, self._read(_join(git_dir, "commondir")), git_dir, gitfile=False)
        outside = common is not None and common.startswith("/")
        if outside and not (
            git_dir.startswith("/") and posixpath.dirname(git_dir) == f"{common}/worktrees"
        ):
            raise _refused(_NOT_BACK.format(what=_name(_join(git_dir, "commondir"))))
        return common

    def _hold(self, git_dir: str) -> None:
        """A directory a `.git` file or `commondir` names, held read-only when inside the
        workspace (outside, it is in no container)."""
        if not git_dir.startswith("/") and not self._held(git_dir):
            self._add_way(git_dir, read_only=True)

    def _submodules(self, work_tree: str, git_dir: str, depth: int) -> None:
        if depth >= MAX_SUBMODULE_DEPTH:
            raise _refused(f"Submodules are nested more than {MAX_SUBMODULE_DEPTH} deep.")
        for path in self._gitlinks(git_dir):
            parts = path.split("/")
            if (
                path.startswith("/")
                or any(p in ("", ".", "..", GIT_DIR_NAME) for p in parts)
                or not path.isprintable()  # also bytes that are not UTF-8 (no mount names them)
            ):
                raise _refused(f"The index of {git_dir} records a submodule at {path!r}.")
            self.repository(_join(work_tree, path), depth=depth + 1)

    def _held(self, relative: str) -> bool:
        """Whether `relative` lies in a directory already held read-only as a whole."""
        return any(relative == d or relative.startswith(d + "/") for d in self._read_only_dirs)

    def _add_way(self, relative: str, *, read_only: bool) -> None:
        """Each directory on the way to `relative` pinned writable, `relative` as asked."""
        parts = relative.split("/")
        for depth in range(1, len(parts) + 1):
            here = "/".join(parts[:depth])
            info = _lstat(self._root, here)
            if info is None or not stat.S_ISDIR(info.st_mode):
                what = (
                    "missing (the model could make it)"
                    if info is None
                    else "a symbolic link"
                    if stat.S_ISLNK(info.st_mode)
                    else "not a directory"
                )
                raise _refused(f"The repository needs {relative} held, and {here} is {what}.")
            self._add(here, info, read_only=read_only and depth == len(parts))

    def _add(self, relative: str, info: os.stat_result, *, read_only: bool) -> None:
        known = self._pins.get(relative)
        if known is not None and (known.read_only or not read_only):
            return
        if len(self._pins) >= MAX_PINS:
            raise _refused(f"The repository needs more than {MAX_PINS} paths held.")
        self._pins[relative] = PathPin(
            path=str(self._root.path / relative),
            identity=(info.st_dev, info.st_ino),
            read_only=read_only,
        )
        if read_only and stat.S_ISDIR(info.st_mode):
            self._read_only_dirs.append(relative)

    def _gitlinks(self, git_dir: str) -> tuple[str, ...]:
        """The submodule paths the index of `git_dir` records (its shared part's too)."""
        config = self._read(_join(git_dir, "config"), CONFIG_MAX_BYTES)
        if config is None:  # a linked worktree's configuration is its common directory's
            common = self._common_dir(git_dir)
            config = self._read(_join(common, "config"), CONFIG_MAX_BYTES) if common else None
        hash_bytes = 32 if _SHA256.search(config or "") else 20
        index = self._index(_join(git_dir, "index"), hash_bytes)
        if index is None:
            return ()
        links = index.gitlinks
        if index.shared:
            shared = self._index(_join(git_dir, f"sharedindex.{index.shared}"), hash_bytes)
            if shared is None:
                raise _refused(f"The split index of {git_dir} names a shared part that is missing.")
            links = (*links, *shared.gitlinks)
        return tuple(dict.fromkeys(links))

    def _index(self, path: str, hash_bytes: int) -> GitIndex | None:
        """An index, parsed (once per change: cached by device, inode, size and mtime)."""
        fd = self._open(path)
        if fd is None:
            return None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_size > INDEX_MAX_BYTES:
                raise _refused(f"{_name(path)} is not an index git could have written.")
            key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
            found = _index_cache.get(key)
            if found is not None:
                return found
            with _parse_lock:
                found = _index_cache.get(key)  # parsed by another thread meanwhile
                if found is None:
                    try:
                        found = read_index(_read_all(fd, info.st_size), hash_bytes)
                    except UnreadableIndex as exc:
                        why = f"{_name(path)} cannot be read as an index ({exc})."
                        raise _refused(why) from exc
                    _index_cache.put(key, found)
            return found
        finally:
            os.close(fd)

    def _read(self, path: str, limit: int = GIT_FILE_MAX_BYTES) -> str | None:
        """A small text file of a repository (None: it does not exist)."""
        fd = self._open(path)
        if fd is None:
            return None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                outside = path.startswith("/")
                raise _refused(
                    _OUTSIDE_UNREADABLE if outside else f"{_name(path)} is not a regular file."
                )
            data = _read_all(fd, limit + 1)
        finally:
            os.close(fd)
        if len(data) > limit:
            raise _refused(f"{_name(path)} is larger than git ever writes one.")
        return data.decode("utf-8", "replace")

    def _open(self, path: str) -> int | None:
        """A file of a repository open for reading (None: it does not exist): a
        workspace-relative one beneath the pinned workspace; an absolute one (a git directory
        elsewhere, a linked worktree's) without a link on the way, and only the workspace
        owner's (it names what git reads for them)."""
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY
        try:
            if not path.startswith("/"):
                return self._root.open_beneath(path, flags)
            fd = openat2(AT_FDCWD, path, flags, RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise _refused(_why(path, exc)) from exc
        if os.fstat(fd).st_uid != self._root.uid:
            os.close(fd)
            raise _refused(_OUTSIDE_UNREADABLE)
        return fd


def _read_all(fd: int, size: int) -> bytes:
    chunks = []
    left = size
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _named(root: PinnedDirectory, text: str | None, base: str, *, gitfile: bool) -> str | None:
    """The directory a `.git` file (`gitfile`) or `commondir` names, relative to `base`:
    workspace-relative when inside the workspace, else absolute; None when it names nothing."""
    if text is None:
        return None
    if gitfile:
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
    if inside == ".":
        return None  # the work tree itself: not a git directory git accepts
    return where if inside == ".." or inside.startswith("../") else inside


def _core_worktree(config: str) -> str | None:
    """The last `worktree` of the `[core]` section of a git configuration (git's own choice
    among several); None when there is none."""
    named = None
    section = ""
    for line in config.splitlines():
        header = _SECTION.match(line)
        if header:
            section = header.group(1).lower()
            continue
        value = _WORKTREE.match(line) if section == "core" else None
        if value:
            named = value.group(1).strip('"')
    return named or None


def _is(path: str, info: os.stat_result) -> bool:
    """Whether `path` (a repository's own words, so followed as git follows them) names the
    object `info` describes."""
    try:
        there = Path(path).stat()
    except (OSError, ValueError):
        return False
    return (there.st_dev, there.st_ino) == (info.st_dev, info.st_ino)


def _join(base: str, name: str) -> str:
    return f"{base}/{name}" if base else name


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


def _name(path: str) -> str:
    """How a refusal names a file: one outside the workspace is not named (what is there, or
    where, is the host's)."""
    return (
        "A file of the git directory outside" if path.startswith("/") else f"The workspace's {path}"
    )


def _why(path: str, exc: OSError) -> str:
    if path.startswith("/"):
        return _OUTSIDE_UNREADABLE
    if exc.errno in (errno.ELOOP, errno.EXDEV):
        return f"{_name(path)} is reached through a symbolic link."
    return f"{_name(path)} cannot be looked at ({exc.strerror})."


_OUTSIDE_UNREADABLE = (
    "A file of the repository's git directory outside the workspace cannot be read (only the "
    "workspace owner's regular files, reached without a symbolic link, are)."
)
_NOT_BACK = (
    "{what} names a git directory outside the workspace that does not name "
    "this work tree back, or that cannot be read (only the workspace owner's files, reached "
    "without a symbolic link, are). A linked worktree's git directory names it in its gitdir "
    "file (`git worktree repair` mends it); a separate git directory needs core.worktree "
    "(`git config core.worktree <work tree>`)."
)


def _refused(why: str) -> ToolError:
    return ToolError(
        f"{why} The sandbox keeps the workspace's repository read-only, and cannot do so here, "
        f"so nothing ran. Ask the user to fix {GIT_DIR_NAME}, or to have the policy grant git "
        "writes (sandbox.git: writable)."
    )
