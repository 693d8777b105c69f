"""The submodules a git index records: the paths of its gitlink entries (mode 160000), which
`git status` run at the repository's root descends into.

Read from the bytes of `.git/index` as git's index format documents it (versions 2 to 4; entry
names padded in 2 and 3, prefix-compressed in 4); a split index names its shared part, whose
entries count too (`SplitIndex.shared`). Anything that does not parse is an error, never a guess.

Git reads an index two ways: one entry after the other, or, with several threads (index.threads,
which a repository's own configuration sets, or a very large index), in the blocks its offset
table (IEOT) names, each block read without the name before it, and the extensions from where its
end-of-entries extension (EOIE) says they start. An index whose table or end marker disagrees
with the sequential reading is refused: each way would see other entries.
"""

from __future__ import annotations

import struct
from array import array
from dataclasses import dataclass

GITLINK_MODE = 0o160000
_TYPE_MASK = 0o170000
_HEADER = struct.Struct(">4sII")
_STAT_BYTES = 40  # ctime, mtime (seconds and nanoseconds), dev, ino, mode, uid, gid, size
_MODE_OFFSET = 24
_EXTENDED = 0x4000
_NAME_MASK = 0x0FFF
MAX_NAME_BYTES = 4096
"""Longer than any path Linux opens: an index naming one is not git's."""
_EOIE_BYTES = 4 + 4 + 4 + 20
"""The end-of-entries extension, header included: git sizes its hash for SHA-1 in both formats,
and looks for it this far before the checksum."""
MAX_GITLINKS = 4096
"""More submodules than any repository has: an index recording more is refused (each would be
held by a mount)."""


class UnreadableIndex(ValueError):
    """The bytes are not a git index this reader understands."""


@dataclass(frozen=True)
class GitIndex:
    """What the reader takes from one index file."""

    gitlinks: tuple[str, ...]
    """Paths of the submodules it records, relative to its work tree."""
    shared: str = ""
    """A split index: the hex name of its shared part (`sharedindex.<name>` beside it)."""


def read_index(data: bytes, hash_bytes: int = 20) -> GitIndex:
    """Parse an index; `hash_bytes` is 20 for SHA-1 repositories, 32 for SHA-256 ones. Linear in
    its size: a prefix-compressed name is rebuilt in place (cutting the previous one's tail and
    adding the new part), never copied whole per entry.

    Raises:
        UnreadableIndex: Not an index of version 2, 3 or 4, or cut short.
    """
    if len(data) < _HEADER.size:
        raise UnreadableIndex("too short for an index header")
    signature, version, count = _HEADER.unpack_from(data)
    if signature != b"DIRC" or version not in (2, 3, 4):
        raise UnreadableIndex("not a git index of version 2 to 4")
    offset = _HEADER.size
    gitlinks: list[str] = []
    name = bytearray()
    fixed = _STAT_BYTES + hash_bytes + 2
    starts = array("Q")
    whole_strip = bytearray()  # version 4: the entry drops all of the name before it
    for _ in range(count):
        start = offset
        starts.append(start)
        if offset + fixed > len(data):
            raise UnreadableIndex("an entry is cut short")
        (mode,) = struct.unpack_from(">I", data, offset + _MODE_OFFSET)
        (flags,) = struct.unpack_from(">H", data, offset + _STAT_BYTES + hash_bytes)
        offset += fixed
        if flags & _EXTENDED:
            if version < 3:
                raise UnreadableIndex("an extended entry in a version 2 index")
            offset += 2
        if version == 4:
            strip, offset = _varint(data, offset)
            end = data.find(b"\0", offset, offset + MAX_NAME_BYTES + 1)
            if end < 0 or strip > len(name):
                raise UnreadableIndex("an entry's name is cut short or longer than any path")
            whole_strip.append(strip == len(name))
            del name[len(name) - strip :]
            name += data[offset:end]
            if len(name) > MAX_NAME_BYTES:
                raise UnreadableIndex("an entry's name is longer than any path")
            # git takes the name's length from the flags, NULs included: a name ending early
            # here hid an entry git reads (attacker round 133: a submodule behind it).
            if flags & _NAME_MASK != _NAME_MASK and len(name) != flags & _NAME_MASK:
                raise UnreadableIndex("an entry's name does not have its recorded length")
            offset = end + 1
        else:
            end = data.find(b"\0", offset, offset + MAX_NAME_BYTES + 1)
            if end < 0:
                raise UnreadableIndex("an entry's name is cut short or longer than any path")
            if flags & _NAME_MASK != _NAME_MASK and end - offset != flags & _NAME_MASK:
                raise UnreadableIndex("an entry's name does not have its recorded length")
            if mode & _TYPE_MASK == GITLINK_MODE:
                name[:] = data[offset:end]  # only a submodule's name is needed
            offset = start + ((end - start) // 8 + 1) * 8  # NUL padding to a multiple of 8
        if mode & _TYPE_MASK == GITLINK_MODE:
            if len(gitlinks) >= MAX_GITLINKS:
                raise UnreadableIndex(f"it records more than {MAX_GITLINKS} submodules")
            gitlinks.append(bytes(name).decode("utf-8", "surrogateescape"))
    extensions = _extensions(data, offset, hash_bytes)
    _check_end_marker(data, offset, extensions, hash_bytes)
    _check_offset_table(data, extensions, starts, whole_strip if version == 4 else None)
    return GitIndex(tuple(gitlinks), _shared_name(data, extensions, hash_bytes))


def _varint(data: bytes, offset: int) -> tuple[int, int]:
    """git's offset varint (each continuation adds one before shifting)."""
    if offset >= len(data):
        raise UnreadableIndex("a name's prefix length is cut short")
    byte = data[offset]
    value = byte & 0x7F
    while byte & 0x80:
        offset += 1
        if offset >= len(data) or value > 1 << 32:
            raise UnreadableIndex("a name's prefix length is cut short")
        byte = data[offset]
        value = ((value + 1) << 7) | (byte & 0x7F)
    return value, offset + 1


Extension = tuple[bytes, int, int]
"""An extension's signature, the offset of its header and the size of its data."""


def _extensions(data: bytes, offset: int, hash_bytes: int) -> list[Extension]:
    """The extensions after the entries: each a signature, a length and its data, up to the
    file's checksum."""
    end = len(data) - hash_bytes
    found: list[Extension] = []
    while offset + 8 <= end:
        signature, size = struct.unpack_from(">4sI", data, offset)
        if offset + 8 + size > end:
            raise UnreadableIndex("an extension runs past the end of the index")
        found.append((signature, offset, size))
        offset += 8 + size
    # The extensions end exactly at the checksum: anything else is not what git wrote, and
    # entries git reads could hide there (attacker round 133).
    if offset != end:
        raise UnreadableIndex("the extensions do not end where the index does")
    return found


def _check_end_marker(
    data: bytes, entries_end: int, extensions: list[Extension], hash_bytes: int
) -> None:
    """Where git finds an end-of-entries marker (at a fixed distance from the end of the file),
    it must be the last extension and say that the extensions start where the entries end:
    git reading with threads takes the extensions from where it says (a shared index named
    elsewhere, say)."""
    at = len(data) - hash_bytes - _EOIE_BYTES
    if at < _HEADER.size or data[at : at + 4] != b"EOIE":
        return
    (size, claimed) = struct.unpack_from(">II", data, at + 4)
    if size != _EOIE_BYTES - 8:
        return  # git ignores an end marker of another size
    if not extensions or extensions[-1][1] != at or claimed != entries_end:
        raise UnreadableIndex("its end-of-entries extension does not mark where the entries end")


def _check_offset_table(
    data: bytes, extensions: list[Extension], starts: array[int], whole_strip: bytearray | None
) -> None:
    """The blocks of the first entry offset table (the one git uses) must start at entries of
    the sequential reading, in order, and cover them all; in version 4 a block's first name must
    not build on the one before it, which git reading the block alone does not have."""
    table = next(((at, size) for signature, at, size in extensions if signature == b"IEOT"), None)
    if table is None:
        return
    at, size = table
    if size < 4:
        raise UnreadableIndex("its entry offset table is cut short")
    (table_version,) = struct.unpack_from(">I", data, at + 8)
    if table_version != 1:
        return  # git does not use a table of another version
    covered = 0
    for block in range((size - 4) // 8):
        offset, entries = struct.unpack_from(">II", data, at + 12 + 8 * block)
        if (
            entries == 0
            or covered + entries > len(starts)
            or starts[covered] != offset
            or (whole_strip is not None and covered > 0 and not whole_strip[covered])
        ):
            raise UnreadableIndex("its entry offset table does not match its entries")
        covered += entries
    if size >= 12 and covered != len(starts):
        raise UnreadableIndex("its entry offset table does not cover its entries")


def _shared_name(data: bytes, extensions: list[Extension], hash_bytes: int) -> str:
    """The shared index a `link` extension names ("" for none)."""
    shared = ""
    for signature, offset, size in extensions:
        if signature == b"link":
            if size < hash_bytes:
                raise UnreadableIndex("a split index names its shared part wrongly")
            named = data[offset + 8 : offset + 8 + hash_bytes]
            shared = "" if not any(named) else named.hex()
    return shared
