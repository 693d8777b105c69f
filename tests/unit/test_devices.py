"""Which filesystems the event loop may read from (daemon.host.devices): tmpfs, and block
filesystems whose devices are the machine's own, looked through loop devices, device-mapper and
md; never one whose blocks come from a file someone else serves."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon.host.devices import loop_node_reads, served_locally
from daemon.host.loop_safe import NeedsThread, descriptor_identity, read_cached
from daemon.host.mounts import mount_at
from tests.unit.conftest import write_uncached


def local(path: Path, sysfs: Path | None = None) -> bool:
    fd = os.open(path, os.O_PATH)
    try:
        mount_id, _ = descriptor_identity(fd)
        if sysfs is None:
            return served_locally(fd, mount_id)
        return served_locally(fd, mount_id, sysfs=sysfs)
    finally:
        os.close(fd)


def fake_device(sysfs: Path, number: int, kind: str) -> Path:
    """A virtual block device `kind` in a sysfs of the test's own, as `number` (st_dev)."""
    node = sysfs / "devices" / "virtual" / "block" / kind
    node.mkdir(parents=True)
    (sysfs / "dev" / "block").mkdir(parents=True, exist_ok=True)
    (sysfs / "dev" / "block" / f"{os.major(number)}:{os.minor(number)}").symlink_to(node)
    return node


def test_the_test_machines_disk_and_memory_are_local(tmp_path: Path) -> None:
    assert local(tmp_path) == (os.stat(tmp_path).st_dev != 0)  # the disk the tests run on
    assert not local(Path("/proc")) and not local(Path("/sys"))


def test_virtual_devices_count_as_what_is_under_them(tmp_path: Path) -> None:
    number = os.stat(tmp_path).st_dev
    if os.major(number) == 0:
        pytest.skip("the test folder is not on a block device of its own")
    # nbd: blocks from a server.
    nbd = tmp_path / "nbd"
    fake_device(nbd, number, "nbd0")
    assert not local(tmp_path, nbd)
    # A loop device over a deleted file, or over a file of /proc (not a block filesystem).
    for backing, expected in (("/gone/disk.img (deleted)", False), ("/proc/self/status", False)):
        sysfs = tmp_path / f"loop{expected}{len(backing)}"
        loop = fake_device(sysfs, number, "loop7")
        (loop / "loop").mkdir()
        (loop / "loop" / "backing_file").write_text(backing + "\n")
        assert local(tmp_path, sysfs) is expected, backing
    # device-mapper over an nbd and over nothing.
    for parts, name in ((["nbd1"], "dm-over-nbd"), ([], "dm-empty")):
        sysfs = tmp_path / name
        dm = fake_device(sysfs, number, "dm-0")
        (dm / "slaves").mkdir()
        for part in parts:
            (sysfs / "devices" / "virtual" / "block" / part).mkdir()
            (sysfs / "devices" / "virtual" / "block" / part / "dev").write_text("43:1\n")
            (sysfs / "dev" / "block" / "43:1").symlink_to(
                sysfs / "devices" / "virtual" / "block" / part
            )
            (dm / "slaves" / part).symlink_to(sysfs / "devices" / "virtual" / "block" / part)
        assert not local(tmp_path, sysfs), name


@pytest.fixture
def ext4_on_loop(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """An ext4 image, mounted through a loop device; yields (mount point, image)."""
    if os.geteuid() != 0:
        pytest.skip("loop devices need root")
    image, mount = tmp_path / "disk.img", tmp_path / "mnt"
    mount.mkdir()
    made = subprocess.run(
        ["mkfs.ext4", "-q", "-F", str(image), "8M"], capture_output=True, check=False
    )
    if (
        made.returncode
        or subprocess.run(
            ["mount", "-o", "loop", str(image), str(mount)], capture_output=True, check=False
        ).returncode
    ):
        pytest.skip("cannot make and mount an ext4 image here")
    try:
        yield mount, image
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_loop_device_is_as_local_as_its_backing_file(ext4_on_loop: tuple[Path, Path]) -> None:
    mount, image = ext4_on_loop
    assert local(mount) == local(image.parent)
    image.unlink()  # its backing file is now "(deleted)": nobody can tell where it is
    assert not local(mount)


def test_a_loop_device_node_names_the_file_it_reads_by_identity(
    ext4_on_loop: tuple[Path, Path],
) -> None:
    """The kernel's (device, inode) of the file, whatever path leads there now; nothing for a
    node that is not a loop device's."""
    mount, image = ext4_on_loop
    mounted = mount_at(mount)
    assert mounted is not None and mounted.source.startswith("/dev/loop")
    info = image.stat()
    assert loop_node_reads(mounted.source) == (info.st_dev, info.st_ino)
    image.rename(image.with_name("moved.img"))
    assert loop_node_reads(mounted.source) == (info.st_dev, info.st_ino)
    assert loop_node_reads("/dev/null") is None
    assert loop_node_reads(str(image)) is None


def test_the_mount_at_a_folder_is_the_one_its_paths_reach(tmp_path: Path) -> None:
    """An older mount moved on top of another is listed before it in the mount table: the one
    the kernel says the folder is on is the one described."""
    if os.geteuid() != 0:
        pytest.skip("mounting needs root")
    early, target, plain = tmp_path / "early", tmp_path / "target", tmp_path / "plain"
    for folder in (early, target, plain):
        folder.mkdir()
    assert _run("mount", "-t", "tmpfs", "-o", "size=1m", "older", str(early))
    try:
        assert _run("mount", "-t", "tmpfs", "-o", "nosuid,nodev,size=1m", "younger", str(target))
        below = mount_at(target)
        assert below is not None and below.source == "younger" and "nosuid" in below.options
        assert _run("mount", "--move", str(early), str(target))
        top = mount_at(target)
        assert top is not None and top.source == "older" and "nosuid" not in top.options
        assert top.root == "/" and mount_at(plain) is None
    finally:
        for _ in range(2):
            subprocess.run(["umount", str(target)], capture_output=True, check=False)
        subprocess.run(["umount", str(early)], capture_output=True, check=False)


def test_the_event_loop_reads_only_what_the_page_cache_holds(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    if not write_uncached(path, b"x" * 20_480):
        pytest.skip("the test folder's filesystem does not take O_DIRECT")
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(NeedsThread):  # nothing of it is in the page cache
            read_cached(fd, 30_000, 0, in_memory=False)
        assert read_cached(fd, 30_000, 0, in_memory=True) == b"x" * 20_480  # tmpfs: as it is
        assert read_cached(fd, 30_000, 0, in_memory=False) == b"x" * 20_480  # cached by now
        assert read_cached(fd, 100, 20_470, in_memory=False) == b"x" * 10
    finally:
        os.close(fd)


def _run(*argv: str) -> bool:
    return subprocess.run(list(argv), capture_output=True, check=False).returncode == 0


def test_a_mount_over_a_loop_devices_backing_file_is_not_taken_for_it(tmp_path: Path) -> None:
    """Attacker round 76: sysfs names the file a loop device reads by its path, and a tmpfs
    mounted over the folder that holds it (a copy of the file in it) made the loop device's
    filesystem look local while its reads went on to the file under the mount (on FUSE)."""
    if os.geteuid() != 0:
        pytest.skip("loop devices need root")
    folder, mount = tmp_path / "images", tmp_path / "mnt"
    folder.mkdir()
    mount.mkdir()
    image = folder / "disk.img"
    if not _run("mkfs.ext4", "-q", "-F", str(image), "8M") or not _run(
        "mount", "-o", "loop", str(image), str(mount)
    ):
        pytest.skip("cannot make and mount an ext4 image here")
    try:
        assert local(mount)
        assert _run("mount", "-t", "tmpfs", "decoy", str(folder))
        (folder / "disk.img").write_bytes(b"decoy")  # what the path opens now: on tmpfs
        assert not local(mount)
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_every_device_of_a_btrfs_filesystem_is_looked_at(tmp_path: Path) -> None:
    """Attacker round 76: btrfs over two devices, one of them a loop device over a file on
    FUSE; only the device the mount table names was looked at. Here the second one reads a
    deleted file, which nobody can tell the place of."""
    if os.geteuid() != 0:
        pytest.skip("loop devices need root")
    images = [tmp_path / "a.img", tmp_path / "b.img"]
    loops: list[str] = []
    mount = tmp_path / "mnt"
    mount.mkdir()
    try:
        for image in images:
            with image.open("wb") as file:
                file.truncate(160 << 20)
            found = subprocess.run(
                ["losetup", "-f", "--show", str(image)], capture_output=True, text=True, check=False
            )
            if found.returncode:
                pytest.skip("no loop device here")
            loops.append(found.stdout.strip())
        if not _run("mkfs.btrfs", "-q", "-f", "-d", "raid0", "-m", "raid0", *loops):
            pytest.skip("cannot make a btrfs filesystem here")
        subprocess.run(["btrfs", "device", "scan", *loops], capture_output=True, check=False)
        if not _run("mount", "-o", f"device={loops[0]},device={loops[1]}", loops[0], str(mount)):
            pytest.skip("cannot mount a btrfs filesystem over two devices here")
        assert local(mount)
        images[1].unlink()
        assert not local(mount)
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
        for loop in loops:
            subprocess.run(["losetup", "-d", loop], check=False)
