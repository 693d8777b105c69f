"""Filesystems mounted inside a directory, as this process's mount table shows them.

A read-only bind mount of a workspace covers the workspace's own filesystem only on older
Docker engines (20.10 makes submounts of a recursive bind writable): a tool that must not write
is refused where the workspace holds other mounts, rather than trusted to behave.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from daemon.host.loop_safe import descriptor_identity

MOUNTINFO = Path("/proc/self/mountinfo")


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes."""
    for escape, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(escape, char)
    return field


def mounts_below(directory: Path, mountinfo: str | None = None) -> list[str]:
    """Mount points strictly inside `directory` (resolved), from /proc/self/mountinfo."""
    text = MOUNTINFO.read_text() if mountinfo is None else mountinfo
    root = str(directory).rstrip("/") + "/"
    below = []
    for line in text.splitlines():
        fields = line.split(" ")
        if len(fields) > 4:
            point = _unescape(fields[4])
            if point.startswith(root):
                below.append(point)
    return below


@dataclasses.dataclass(frozen=True)
class Mount:
    """One mount, as the mount table describes it."""

    root: str
    """The folder of its filesystem that is mounted ("/": the whole of it)."""
    source: str
    options: frozenset[str]
    """Its own options (nosuid, nodev, ro...), not its filesystem's."""


def mount_id_of(path: Path) -> int:
    """The id of the mount `path` (not followed if a link) is on, as the kernel says an open
    descriptor of it is: a mount on `path` itself when there is one. OSError when it cannot be
    opened."""
    fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        return descriptor_identity(fd)[0]
    finally:
        os.close(fd)


def mount_at(directory: Path) -> Mount | None:
    """The mount serving `directory` (resolved), when one is mounted there: the one the kernel
    says a descriptor of it is on, not one picked from the table by its place in it (an older
    mount moved on top of another is listed before it: attacker round 176). None when nothing
    is mounted there."""
    serving = str(mount_id_of(directory))
    for line in MOUNTINFO.read_text(errors="replace").splitlines():
        fields = line.split(" ")
        if fields[0] != serving or len(fields) < 6 or "-" not in fields:
            continue
        if _unescape(fields[4]) != str(directory):
            return None  # it is on the mount of a folder above
        return Mount(
            root=_unescape(fields[3]),
            source=_unescape(fields[fields.index("-") + 2]),
            options=frozenset(fields[5].split(",")),
        )
    return None
