"""Whether a filesystem's bytes come from the machine itself: what lets the event loop read there.

A filesystem's type says how it is laid out, not who serves its blocks: an ext4 image on a loop
device whose backing file is on FUSE is ext4, and each of its reads that misses the cache waits
on the FUSE server (attacker round 75: forever). So a block filesystem counts as local only when
every device under it (each one of a btrfs) is, as sysfs tells: a device of the machine's own
(a disk, an NVMe or virtio drive: not under /sys/devices/virtual), a loop device whose backing
file (the one the kernel says it reads, whatever its path opens now) is on a local filesystem
in turn, or a device-mapper or md device all of whose parts are local. Anything else (nbd, a
loop device over a deleted file, a device sysfs does not describe) is not. Blocking (it stats
the backing files): done once, when a workspace is pinned, in a thread. Not seen: a device
added to a btrfs filesystem after that, and XFS's external log and realtime devices (both need
root, who can stop the daemon anyway).
"""

from __future__ import annotations

import fcntl
import os
import stat
import struct
from pathlib import Path

from daemon.host.loop_safe import descriptor_identity
from daemon.host.statfs import BTRFS_MAGIC, EXT_MAGIC, TMPFS_MAGIC, XFS_MAGIC, filesystem_type

BLOCK_FILESYSTEMS = frozenset({EXT_MAGIC, BTRFS_MAGIC, XFS_MAGIC})
MAX_DEPTH = 4
"""Loop devices over files of loop devices... looked through at most this deep."""
SYSFS = Path("/sys")
MOUNTINFO = Path("/proc/self/mountinfo")


def served_locally(fd: int, mount_id: int, *, sysfs: Path = SYSFS, depth: int = 0) -> bool:
    """Whether the filesystem of the open descriptor `fd` (on mount `mount_id`) is tmpfs, or a
    block filesystem whose devices are all the machine's own (see above)."""
    kind = filesystem_type(fd)
    if kind == TMPFS_MAGIC:
        return True
    if kind not in BLOCK_FILESYSTEMS or depth > MAX_DEPTH:
        return False
    devices = _devices_of(fd, mount_id, sysfs)
    return bool(devices) and all(_local_device(device, sysfs, depth) for device in devices)


def _devices_of(fd: int, mount_id: int, sysfs: Path) -> list[tuple[int, int]]:
    """The block devices a filesystem is on: its st_dev; for btrfs (whose st_dev is a number of
    its own, and which may span several devices: attacker round 76 put one on FUSE) every
    device sysfs lists for the filesystem the mount table names a device of. Empty: unknown."""
    number = os.fstat(fd).st_dev
    if os.major(number) != 0:
        return [(os.major(number), os.minor(number))]
    source = _mount_source(mount_id)
    if source is None or not source.startswith("/dev/"):
        return []
    try:
        named = Path(source).stat().st_rdev
        name = (sysfs / "dev" / "block" / f"{os.major(named)}:{os.minor(named)}").resolve().name
        members = [
            folder
            for folder in (sysfs / "fs" / "btrfs").glob("*/devices")
            if (folder / name).exists()
        ]
        if len(members) != 1:
            return []
        return [_number(entry / "dev") for entry in sorted(members[0].iterdir())]
    except (OSError, ValueError):
        return []


def _number(record: Path) -> tuple[int, int]:
    """A device number as sysfs writes it ("8:1"); ValueError when it is not one."""
    major, minor = record.read_text().strip().split(":")
    return int(major), int(minor)


def _mount_source(mount_id: int) -> str | None:
    for line in MOUNTINFO.read_text(errors="replace").splitlines():
        fields = line.split(" ")
        if fields[0] == str(mount_id) and " - " in line:
            after = line.split(" - ", 1)[1].split(" ")
            return after[1] if len(after) > 1 else None
    return None


def _local_device(device: tuple[int, int], sysfs: Path, depth: int) -> bool:
    if depth > MAX_DEPTH:
        return False
    node = sysfs / "dev" / "block" / f"{device[0]}:{device[1]}"
    try:
        real = node.resolve(strict=True)
    except OSError:
        return False
    if "/devices/virtual/" not in str(real):
        return True  # hardware (or what the hypervisor presents as such)
    if (real / "partition").exists():
        real = real.parent  # a partition of a virtual device: judge the device
    if (real / "loop").is_dir():
        return _local_backing_file(real, device, sysfs, depth)
    parts = sorted((real / "slaves").iterdir()) if (real / "slaves").is_dir() else []
    return bool(parts) and all(_local_part(part, sysfs, depth) for part in parts)


def _local_part(part: Path, sysfs: Path, depth: int) -> bool:
    try:
        device = _number(part / "dev")
    except (OSError, ValueError):
        return False
    return _local_device(device, sysfs, depth + 1)


def _local_backing_file(loop: Path, device: tuple[int, int], sysfs: Path, depth: int) -> bool:
    """Whether the file loop device `loop` (its sysfs folder) reads is on a local filesystem.
    sysfs names it by the path it was set up with, and that path may lead elsewhere now (a
    mount over it: attacker round 76); it is judged only when the file opened by that path is
    the one the kernel says the loop device reads (LOOP_GET_STATUS64)."""
    try:
        backing = (loop / "loop" / "backing_file").read_text().rstrip("\n")
        reads = _loop_reads(loop.name, device)
    except OSError:
        return False
    if reads is None or not backing.startswith("/") or backing.endswith(" (deleted)"):
        return False
    try:
        fd = os.open(backing, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        info = os.fstat(fd)
        if (info.st_dev, info.st_ino) != reads:
            return False
        mount_id, _ = descriptor_identity(fd)
        return served_locally(fd, mount_id, sysfs=sysfs, depth=depth + 1)
    except OSError:
        return False
    finally:
        os.close(fd)


_LOOP_GET_STATUS64 = 0x4C05
_LOOP_INFO64 = struct.Struct("=QQ")  # lo_device, lo_inode: the start of struct loop_info64
_LOOP_INFO64_SIZE = 232


_LOOP_MAJOR = 7


def loop_device_of(node: str) -> tuple[int, int] | None:
    """The device number of the loop device `node` (a mount's source) is a node of, whatever
    its name; None when it is not one."""
    if not node.startswith("/"):
        return None
    try:
        info = Path(node).stat()
    except OSError:
        return None
    number = info.st_rdev
    if not stat.S_ISBLK(info.st_mode) or os.major(number) != _LOOP_MAJOR:
        return None
    return os.major(number), os.minor(number)


def loop_node_reads(node: str) -> tuple[int, int] | None:
    """(device, inode) of the file the loop device node `node` reads, as the kernel records
    them, asked through that node itself; None when it is not a loop device's node or it
    cannot be asked (not root)."""
    number = loop_device_of(node)
    if number is None:  # not opened: opening some devices does something
        return None
    try:
        fd = os.open(node, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        opened = os.fstat(fd)
        if not stat.S_ISBLK(opened.st_mode) or opened.st_rdev != os.makedev(*number):
            return None
        buffer = bytearray(_LOOP_INFO64_SIZE)
        fcntl.ioctl(fd, _LOOP_GET_STATUS64, buffer)
    except OSError:
        return None
    finally:
        os.close(fd)
    lo_device, lo_inode = _LOOP_INFO64.unpack_from(buffer)
    return lo_device, lo_inode


def _loop_reads(name: str, device: tuple[int, int]) -> tuple[int, int] | None:
    """(device, inode) of the file loop device `name` (number `device`) reads, as the kernel
    records them; None when its node cannot be asked (not root, no /dev node)."""
    node = f"/dev/{name}"
    return loop_node_reads(node) if loop_device_of(node) == device else None
