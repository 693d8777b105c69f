"""Who a folder's ACL lets write it, read back from the kernel as setfacl would leave it."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from sandbox.posix_acl import ACCESS, access_acl, acl_writers

ANY = 0xFFFFFFFF


def _set(folder: Path, *entries: tuple[int, int, int]) -> None:
    raw = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in sorted(entries))
    os.setxattr(folder, ACCESS, raw)


def test_a_folder_without_an_acl_names_no_one(tmp_path: Path) -> None:
    assert access_acl(str(tmp_path)) == b""
    assert acl_writers(access_acl(str(tmp_path))) == acl_writers(b"")


def test_named_writers_count_within_the_mask(tmp_path: Path) -> None:
    base = ((1, 7, ANY), (4, 5, ANY), (0x20, 5, ANY))
    _set(tmp_path, *base, (2, 7, 1500), (8, 6, 1600), (2, 5, 1700), (0x10, 7, ANY))
    named = acl_writers(access_acl(str(tmp_path)))
    assert (named.users, named.groups) == ({1500}, {1600})
    _set(tmp_path, *base, (2, 7, 1500), (8, 7, 1600), (0x10, 5, ANY))  # the mask takes write
    named = acl_writers(access_acl(str(tmp_path)))
    assert (named.users, named.groups) == (frozenset(), frozenset())


@pytest.mark.parametrize("raw", [b"\1\0\0\0", b"\2\0\0\0\1\0", b"\3\0\0\0" + b"\0" * 8])
def test_what_is_not_an_acl_is_refused(raw: bytes) -> None:
    with pytest.raises(ValueError, match="not a POSIX ACL"):
        acl_writers(raw)
