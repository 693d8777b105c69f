"""Which filesystem a descriptor is on: statfs(2)'s f_type, which os.statvfs does not give."""

from __future__ import annotations

import ctypes
import os

EXT_MAGIC = 0xEF53
"""ext2, ext3 and ext4."""
BTRFS_MAGIC = 0x9123683E
TMPFS_MAGIC = 0x01021994
XFS_MAGIC = 0x58465342

_libc = ctypes.CDLL(None, use_errno=True)


def filesystem_type(fd: int) -> int:
    """statfs f_type of the filesystem `fd` (an O_PATH descriptor will do) is on."""
    buffer = ctypes.create_string_buffer(120)  # struct statfs; f_type is its first word
    if _libc.fstatfs(fd, buffer) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return ctypes.c_long.from_buffer(buffer).value
