"""What a walk on the event loop (a Glob's first slice, `Walk.first_slice`) may touch.

The event loop serves every caller, so a walk there must not wait on anything whose time it
cannot bound: it stays on the filesystem of the directory it starts in (a hung network or FUSE
mount under it would hold everyone), lists only directories whose size bounds the kernel's work
(an emptied ext4 directory keeps its blocks, and listing its millions of empty slots takes
seconds without returning a single entry), and runs only on a filesystem a walker thread has
found to be local and to name each entry's type in its listings (elsewhere telling a directory
from a file takes a stat, which would cross onto a mount; ext4 made without `filetype` names
none). Anything else ends the slice, and the walk starts again in a thread.

What it does not bound: one read from the disk when the directory is not in the page cache. A
disk of the machine's own: the filesystem must be served locally (daemon.host.devices), never
by a loop device over a file someone serves (attacker round 75 held the loop forever that way).
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import sys
import weakref

from daemon.host.pinned import (
    RESOLVE_BENEATH,
    RESOLVE_NO_MAGICLINKS,
    RESOLVE_NO_SYMLINKS,
    RESOLVE_NO_XDEV,
    PinnedDirectory,
    openat2,
)
from daemon.host.statfs import BTRFS_MAGIC, EXT_MAGIC, TMPFS_MAGIC, filesystem_type

TYPED_LISTINGS = frozenset({EXT_MAGIC, BTRFS_MAGIC, TMPFS_MAGIC})
"""statfs f_type of filesystems whose listings always carry each entry's type (d_type); XFS
does only when made with ftype=1, which statfs does not tell."""
MAX_DIRECTORY_BYTES = 64 * 1024
"""A directory larger than this (st_size) is listed in a thread only."""
MAX_LISTED_BYTES = 256 * 1024
"""The directories one slice lists may be this large together."""

_SYS_GETDENTS64 = {"x86_64": 217, "aarch64": 61, "riscv64": 61}.get(os.uname().machine)
"""None elsewhere: no listing is then taken to carry types (no guessed system call number)."""
_DT_UNKNOWN = 0
_ENTRY_TYPE_AT = 18  # struct linux_dirent64: d_ino (8), d_off (8), d_reclen (2), d_type (1)

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_verdicts: dict[int, bool] = {}
"""id(pinned workspace) -> whether a first slice may walk on its filesystem (`learn_filesystem`);
an entry goes with its workspace object."""


def may_walk_on_loop(root: PinnedDirectory) -> bool:
    """Whether the filesystem of the pinned workspace `root` was found fit for a first slice:
    served by the machine itself (daemon.host.devices: a listing that misses the cache reads a
    disk, not a loop device's file on FUSE), and typed (False until a walker thread looked)."""
    return root.local and _verdicts.get(id(root), False)


def learn_filesystem(root: PinnedDirectory, directory_fd: int) -> None:
    """Look at the filesystem of an open directory of the workspace (blocking: from a walker
    thread) and remember, for `root`, whether a first slice may walk there: one of
    TYPED_LISTINGS, and its listing of the directory names entry types. Only a directory on the
    root's own filesystem tells: the root's descriptor keeps that filesystem mounted (even
    unmounted lazily), so no other can take its device number while the verdict is used (a
    verdict kept by device number alone outlived its filesystem: round 73 had a FUSE mount take
    an unmounted tmpfs's number and be listed on the event loop)."""
    key = id(root)
    if key in _verdicts:
        return
    try:
        if os.fstat(directory_fd).st_dev != root.device:
            return  # another filesystem inside the workspace: the root's own stays unknown
        fit = filesystem_type(directory_fd) in TYPED_LISTINGS and _lists_types(directory_fd)
    except OSError:
        fit = False
    _verdicts[key] = fit
    weakref.finalize(root, _verdicts.pop, key, None)


def _lists_types(directory_fd: int) -> bool:
    """Whether the first entries the kernel lists for the directory ("." and ".." at least)
    carry their type; read through a descriptor of its own, so the caller's offset stays."""
    if _SYS_GETDENTS64 is None:
        return False
    fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=directory_fd)
    try:
        buffer = ctypes.create_string_buffer(4096)
        size = _libc.syscall(_SYS_GETDENTS64, fd, buffer, len(buffer))
        if size <= 0:
            return False
        raw, offset, types = buffer.raw[:size], 0, []
        while offset < size:
            length = int.from_bytes(raw[offset + 16 : offset + 18], sys.byteorder)
            types.append(raw[offset + _ENTRY_TYPE_AT])
            offset += max(length, 1)
        return bool(types) and _DT_UNKNOWN not in types
    finally:
        os.close(fd)


class OtherMount(OSError):
    """A file of the listing is another mount (a file bind-mounted over it)."""


def directory_bytes(fd: int) -> int:
    """The size of an open directory (its listing's size on the filesystems above)."""
    return os.fstat(fd).st_size


def regular_file_mtime(fd: int) -> int | None:
    """mtime of what an open descriptor (O_PATH will do) names when it is a regular file, else
    None; the descriptor is closed."""
    try:
        info = os.fstat(fd)
    finally:
        os.close(fd)
    return info.st_mtime_ns if stat.S_ISREG(info.st_mode) else None


def mtime_here(dir_fd: int, name: str) -> int | None:
    """mtime of the regular file `name` in the open directory, opened (O_PATH, never through a
    link) without leaving the directory's mount; None for anything else. OtherMount when the
    name is a mount point: stat on it would reach the mounted filesystem."""
    try:
        fd = openat2(
            dir_fd,
            name,
            os.O_PATH | os.O_NOFOLLOW,
            RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV,
        )
    except OSError as exc:
        if exc.errno == errno.EXDEV:
            raise OtherMount(exc.errno, exc.strerror, name) from exc
        return None
    return regular_file_mtime(fd)
