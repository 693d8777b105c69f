"""openat2(2), which Python's os module does not offer: an open whose path resolution the kernel
restricts (no symbolic link anywhere on the way, never above a directory, no crossing of a
mount), so what a path names cannot be changed under the caller by a link swapped in meanwhile.
"""

from __future__ import annotations

import ctypes
import os

_SYS_OPENAT2 = 437  # the same number on every Linux architecture
AT_FDCWD = -100
RESOLVE_NO_XDEV = 0x01
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
RESOLVE_CACHED = 0x20
"""Lookups from the kernel's caches only (EAGAIN where one would need I/O or a revalidation)."""


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long


def openat2(dir_fd: int, path: str, flags: int, resolve: int) -> int:
    """openat2(2): a descriptor, or OSError (ENOSYS on kernels before 5.6: refuse, never guess)."""
    how = _OpenHow(flags | os.O_CLOEXEC, 0, resolve)
    fd = int(
        _syscall(
            ctypes.c_long(_SYS_OPENAT2),
            ctypes.c_int(dir_fd),
            ctypes.c_char_p(os.fsencode(path)),
            ctypes.byref(how),
            ctypes.c_size_t(ctypes.sizeof(how)),
        )
    )
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), path)
    return fd
