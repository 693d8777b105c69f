"""Subvolumes as btrfs's own trees know them: by descriptor and id, never by a name or path a
listing printed (a name may hold a newline and forge a listing's line, and a path is followed
through links when it is used: attacker round 181).

Both ioctls need CAP_SYS_ADMIN (the daemon is root wherever it budgets workspaces)."""

from __future__ import annotations

import fcntl
import struct

# _IOWR(0x94, 17 and 18, 4096 bytes) from linux/btrfs.h.
_TREE_SEARCH = 0xD0009411
_INO_LOOKUP = 0xD0009412
_ARGS_SIZE = 4096
_ROOT_TREE = 1
_ROOT_REF_KEY = 156
_FIRST_FREE_OBJECTID = 256  # a subvolume's top folder
_U64_MAX = 2**64 - 1
# struct btrfs_ioctl_search_key: tree_id, min/max objectid, min/max offset, min/max transid,
# min/max type, nr_items, then 36 bytes unused.
_SEARCH_KEY = struct.Struct("=7Q3I36x")
# struct btrfs_ioctl_search_header: transid, objectid, offset, type, len.
_ITEM_HEADER = struct.Struct("=3Q2I")
_ITEMS_PER_SEARCH = 4096


def subvolume_id(fd: int) -> int:
    """The id of the subvolume the folder open at `fd` belongs to."""
    args = bytearray(_ARGS_SIZE)
    struct.pack_into("=2Q", args, 0, 0, _FIRST_FREE_OBJECTID)
    fcntl.ioctl(fd, _INO_LOOKUP, args, True)
    (tree,) = struct.unpack_from("=Q", args, 0)
    return int(tree)


def child_subvolumes(fd: int, parent: int) -> list[int]:
    """The ids of the subvolumes whose parent is subvolume `parent`, on the filesystem of the
    folder open at `fd` (the root tree's references from `parent`)."""
    children: list[int] = []
    offset = 0
    while True:
        args = bytearray(_ARGS_SIZE)
        _SEARCH_KEY.pack_into(
            args,
            0,
            _ROOT_TREE,
            parent,
            parent,
            offset,
            _U64_MAX,
            0,
            _U64_MAX,
            _ROOT_REF_KEY,
            _ROOT_REF_KEY,
            _ITEMS_PER_SEARCH,
        )
        fcntl.ioctl(fd, _TREE_SEARCH, args, True)
        found = _SEARCH_KEY.unpack_from(args, 0)[-1]
        if not found:
            return children
        position = _SEARCH_KEY.size
        for _ in range(found):
            _, objectid, child, kind, length = _ITEM_HEADER.unpack_from(args, position)
            position += _ITEM_HEADER.size + length
            if objectid != parent or kind != _ROOT_REF_KEY:
                return children  # past the range asked for: nothing of `parent` follows
            children.append(int(child))
        if children[-1] >= _U64_MAX:
            return children
        offset = children[-1] + 1  # the next search starts after the last child found
