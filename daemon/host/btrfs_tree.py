"""Subvolumes as btrfs's root tree knows them: by id, never by a name or path a listing printed
(a name may hold a newline and forge a listing's line, and a path is followed through links
when it is used: attacker round 181), and without entering any of them (a folder may have
something mounted over it that never answers).

The tree search needs CAP_SYS_ADMIN (the daemon is root wherever it budgets workspaces)."""

from __future__ import annotations

import fcntl
import struct
from dataclasses import dataclass

# _IOWR(0x94, 17, struct btrfs_ioctl_search_args) from linux/btrfs.h: 4096 bytes.
_TREE_SEARCH = 0xD0009411
_ARGS_SIZE = 4096
_ROOT_TREE = 1
_ROOT_REF_KEY = 156
#: The id of a btrfs filesystem's top subvolume.
TOP_SUBVOLUME = 5
#: The inode number of a subvolume's own top folder.
SUBVOLUME_TOP_FOLDER = 256
_U64_MAX = 2**64 - 1
# struct btrfs_ioctl_search_key: tree_id, min/max objectid, min/max offset, min/max transid,
# min/max type, nr_items, then 36 bytes unused (104 in all).
_SEARCH_KEY = struct.Struct("=7Q3I36x")
_NR_ITEMS_AT = 64
# struct btrfs_ioctl_search_header: transid, objectid, offset, type, len.
_ITEM_HEADER = struct.Struct("=3Q2I")
# struct btrfs_root_ref: dirid, sequence, name_len; the name follows.
_ROOT_REF = struct.Struct("=2QH")
# As many as the kernel can fit: the 3,992 bytes after the key bound each answer anyway.
_ITEMS_PER_SEARCH = 4096


@dataclass(frozen=True)
class Child:
    """A subvolume in another one, as the root tree refers to it."""

    id: int
    folder: int
    """The inode number of the folder of the parent that holds it (256: the parent's top)."""
    name: bytes


def children(fd: int, parent: int, limit: int) -> list[Child]:
    """The subvolumes whose parent is subvolume `parent`, on the filesystem of the folder open
    at `fd` (none is entered); at most `limit` + 1 of them, so that a caller can tell when there
    are more than it takes."""
    found: list[Child] = []
    start = 0
    while len(found) <= limit:
        args = bytearray(_ARGS_SIZE)
        _SEARCH_KEY.pack_into(
            args,
            0,
            _ROOT_TREE,
            parent,
            parent,
            start,
            _U64_MAX,
            0,
            _U64_MAX,
            _ROOT_REF_KEY,
            _ROOT_REF_KEY,
            _ITEMS_PER_SEARCH,
        )
        fcntl.ioctl(fd, _TREE_SEARCH, args, True)
        (answered,) = struct.unpack_from("=I", args, _NR_ITEMS_AT)
        if not answered:
            return found
        position = _SEARCH_KEY.size
        for _ in range(answered):
            _, objectid, child, kind, length = _ITEM_HEADER.unpack_from(args, position)
            item = position + _ITEM_HEADER.size
            position = item + length
            if objectid != parent or kind != _ROOT_REF_KEY:
                return found  # past the range asked for: nothing of `parent` follows
            folder, _, name_length = _ROOT_REF.unpack_from(args, item)
            name_at = item + _ROOT_REF.size
            found.append(Child(child, folder, bytes(args[name_at : name_at + name_length])))
        if found[-1].id >= _U64_MAX:
            return found
        start = found[-1].id + 1  # the next search starts after the last child found
    return found
