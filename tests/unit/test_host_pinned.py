"""Workspaces held by descriptor (openat2 on this kernel): pinned without any symlink, verified
against their device and inode, and opened beneath without ever leaving them."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from daemon.errors import ConfinementError
from daemon.host.confine import open_confined
from daemon.host.pinned import NotPinnable, PinnedDirectory, WorkspaceMoved


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path.resolve()
    (root / "ws" / "sub").mkdir(parents=True)
    (root / "ws" / "sub" / "a.txt").write_text("inside\n")
    (root / "out").mkdir()
    (root / "out" / "secret.txt").write_text("outside\n")
    return root


def test_a_path_with_a_symlink_in_it_is_not_pinned(tree: Path) -> None:
    (tree / "link").symlink_to(tree / "ws")
    with pytest.raises(NotPinnable) as refused:
        PinnedDirectory.pin(tree / "link" / "sub")
    assert refused.value.errno == errno.ELOOP
    with pytest.raises(NotPinnable):
        PinnedDirectory.pin(tree / "ws" / "sub" / "a.txt")
    with pytest.raises(NotPinnable):
        PinnedDirectory.pin(Path("relative"))


def test_verify_notices_a_rename_and_a_symlink_swapped_in(tree: Path) -> None:
    pinned = PinnedDirectory.pin(tree / "ws")
    try:
        pinned.verify()
        (tree / "ws").rename(tree / "moved")
        (tree / "ws").mkdir()
        with pytest.raises(WorkspaceMoved):
            pinned.verify()
        (tree / "ws").rmdir()
        (tree / "ws").symlink_to(tree / "moved")
        with pytest.raises(WorkspaceMoved):
            pinned.verify()  # the same directory, but through a symlink now
    finally:
        pinned.close()


def test_opens_stay_beneath_the_pinned_directory_whatever_is_swapped(tree: Path) -> None:
    pinned = PinnedDirectory.pin(tree / "ws")
    try:
        fd = open_confined(pinned, tree / "ws" / "sub" / "a.txt")
        assert os.read(fd, 100) == b"inside\n"
        os.close(fd)
        # The sub directory becomes a symlink to outside: the open refuses, never reads it.
        (tree / "ws" / "sub").rename(tree / "ws" / "real-sub")
        (tree / "ws" / "sub").symlink_to(tree / "out")
        with pytest.raises(ConfinementError, match="symbolic link"):
            open_confined(pinned, tree / "ws" / "sub" / "secret.txt")
        # The workspace path itself is swapped: the held directory is still the one opened.
        (tree / "ws").rename(tree / "held")
        (tree / "ws").symlink_to(tree / "out")
        fd = open_confined(pinned, tree / "ws" / "real-sub" / "a.txt")
        assert os.read(fd, 100) == b"inside\n"
        os.close(fd)
        with pytest.raises(FileNotFoundError):
            open_confined(pinned, tree / "ws" / "secret.txt")
    finally:
        pinned.close()


def test_dotdot_cannot_leave_the_pinned_directory(tree: Path) -> None:
    pinned = PinnedDirectory.pin(tree / "ws")
    try:
        with pytest.raises(OSError) as escaped:
            pinned.open_beneath("../out/secret.txt", os.O_RDONLY)
        assert escaped.value.errno == errno.EXDEV
    finally:
        pinned.close()


def test_same_mount_opens_refuse_to_cross_onto_another_mount() -> None:
    proc = Path("/proc")
    if not os.path.ismount(proc) or os.stat("/").st_dev == proc.stat().st_dev:
        pytest.skip("needs /proc mounted apart from /")
    root = PinnedDirectory.pin(Path("/"))
    try:
        os.close(root.open_beneath("proc", os.O_RDONLY | os.O_DIRECTORY))
        with pytest.raises(OSError) as refused:
            root.open_beneath("proc", os.O_RDONLY | os.O_DIRECTORY, same_mount=True)
        assert refused.value.errno == errno.EXDEV
        os.close(root.open_beneath("etc", os.O_RDONLY | os.O_DIRECTORY, same_mount=True))
    finally:
        root.close()
