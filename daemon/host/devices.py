"""Whether a filesystem's bytes come from the machine itself: what lets the event loop read there.

A filesystem's type says how it is laid out, not who serves its blocks: an ext4 image on a loop
device whose backing file is on FUSE is ext4, and each of its reads that misses the cache waits
on the FUSE server (attacker round 75: forever). So a block filesystem counts as local only when
every device under it is, as sysfs tells: a device of the machine's own (a disk, an NVMe or
virtio drive: not under /sys/devices/virtual), a loop device whose backing file is on a local
filesystem in turn, or a device-mapper or md device all of whose parts are local. Anything else
(nbd, a loop device over a deleted file, a device sysfs does not describe) is not. Blocking (it
stats the backing files): done once, when a workspace is pinned, in a thread.
"""

from __future__ import annotations

import os
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
    device = _device_of(fd, mount_id)
    return device is not None and _local_device(device, sysfs, depth)


def _device_of(fd: int, mount_id: int) -> tuple[int, int] | None:
    """The block device a filesystem is on: its st_dev, or for btrfs (whose st_dev is a number
    of its own) the device the mount table names as its source."""
    number = os.fstat(fd).st_dev
    if os.major(number) != 0:
        return os.major(number), os.minor(number)
    source = _mount_source(mount_id)
    if source is None or not source.startswith("/dev/"):
        return None
    try:
        info = Path(source).stat()
    except OSError:
        return None
    return os.major(info.st_rdev), os.minor(info.st_rdev)


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
        return _local_backing_file(real / "loop" / "backing_file", sysfs, depth)
    parts = sorted((real / "slaves").iterdir()) if (real / "slaves").is_dir() else []
    return bool(parts) and all(_local_part(part, sysfs, depth) for part in parts)


def _local_part(part: Path, sysfs: Path, depth: int) -> bool:
    try:
        major, minor = (part / "dev").read_text().strip().split(":")
    except (OSError, ValueError):
        return False
    return _local_device((int(major), int(minor)), sysfs, depth + 1)


def _local_backing_file(record: Path, sysfs: Path, depth: int) -> bool:
    try:
        backing = record.read_text().rstrip("\n")
    except OSError:
        return False
    if not backing.startswith("/") or backing.endswith(" (deleted)"):
        return False
    try:
        fd = os.open(backing, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        mount_id, _ = descriptor_identity(fd)
        return served_locally(fd, mount_id, sysfs=sysfs, depth=depth + 1)
    except OSError:
        return False
    finally:
        os.close(fd)
