"""POSIX access ACLs: the accounts and groups an ACL lets write a folder besides what its mode's
bits say. With an ACL, the group bits of the mode show its mask, so a folder of root's in mode
0775 may still be writable by any named account (setfacl -m u:NAME:rwx)."""

from __future__ import annotations

import errno
import os
import struct
from dataclasses import dataclass

ACCESS = "system.posix_acl_access"
_VERSION = 2
_ENTRY = struct.Struct("<HHI")
_NAMED_USER, _NAMED_GROUP, _MASK = 0x02, 0x08, 0x10
_WRITE = 0x02


@dataclass(frozen=True)
class AclWriters:
    """Who a folder's access ACL lets write it by name."""

    users: frozenset[int]
    groups: frozenset[int]


def access_acl(path: str) -> bytes:
    """The access ACL of `path` as the kernel stores it, not following a link (b"" when it has
    none, or its filesystem has no ACLs). OSError when it cannot be read."""
    try:
        return os.getxattr(path, ACCESS, follow_symlinks=False)
    except OSError as exc:
        if exc.errno in (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP):
            return b""
        raise


def acl_writers(raw: bytes) -> AclWriters:
    """The named users and groups `raw` (an `access_acl`) lets write, the mask applied.
    ValueError for what is not an ACL the kernel writes."""
    if not raw:
        return AclWriters(frozenset(), frozenset())
    if len(raw) < 4 or (len(raw) - 4) % _ENTRY.size or struct.unpack_from("<I", raw)[0] != _VERSION:
        raise ValueError("not a POSIX ACL of version 2")
    entries = [_ENTRY.unpack_from(raw, at) for at in range(4, len(raw), _ENTRY.size)]
    mask = next((perm for tag, perm, _ in entries if tag == _MASK), 0o7)
    users = {who for tag, perm, who in entries if tag == _NAMED_USER and perm & mask & _WRITE}
    groups = {who for tag, perm, who in entries if tag == _NAMED_GROUP and perm & mask & _WRITE}
    return AclWriters(frozenset(users), frozenset(groups))
