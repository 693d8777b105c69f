"""What a walk on the event loop (a Glob's first slice, `Walk.first_slice`) may touch.

The event loop serves every caller, so a walk there must not wait on anything whose time it
cannot bound: it stays on the filesystem of the directory it starts in (a hung network or FUSE
mount under it would hold everyone), lists only directories whose size bounds the kernel's work
(an emptied ext4 directory keeps its blocks, and listing its millions of empty slots takes
seconds without returning a single entry), and starts only on filesystems that name each entry's
type in the listing (elsewhere telling a directory from a file takes a stat, which would cross
onto a mount). Anything else ends the slice, and the walk starts again in a thread.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat

from daemon.host.pinned import (
    RESOLVE_BENEATH,
    RESOLVE_NO_MAGICLINKS,
    RESOLVE_NO_SYMLINKS,
    RESOLVE_NO_XDEV,
    openat2,
)

TYPED_LISTINGS = frozenset(
    {
        0xEF53,  # ext2, ext3, ext4
        0x9123683E,  # btrfs (tooljail's budgeted workspaces)
        0x01021994,  # tmpfs
    }
)
"""statfs f_type of filesystems whose listings always carry each entry's type (d_type); XFS
does only when made with ftype=1, which statfs does not tell."""
MAX_DIRECTORY_BYTES = 64 * 1024
"""A directory larger than this (st_size) is listed in a thread only."""
MAX_LISTED_BYTES = 256 * 1024
"""The directories one slice lists may be this large together."""

_libc = ctypes.CDLL(None, use_errno=True)


class OtherMount(OSError):
    """A file of the listing is another mount (a file bind-mounted over it)."""


def filesystem_type(fd: int) -> int:
    """statfs f_type of the filesystem `fd` is on."""
    buffer = ctypes.create_string_buffer(120)  # struct statfs; f_type is its first word
    if _libc.fstatfs(fd, buffer) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return ctypes.c_long.from_buffer(buffer).value


def directory_bytes(fd: int) -> int:
    """The size of an open directory (its listing's size on the filesystems above)."""
    return os.fstat(fd).st_size


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
    try:
        info = os.fstat(fd)
    finally:
        os.close(fd)
    return info.st_mtime_ns if stat.S_ISREG(info.st_mode) else None
