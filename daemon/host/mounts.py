"""Filesystems mounted inside a directory, as this process's mount table shows them.

A read-only bind mount of a workspace covers the workspace's own filesystem only on older
Docker engines (20.10 makes submounts of a recursive bind writable): a tool that must not write
is refused where the workspace holds other mounts, rather than trusted to behave.
"""

from __future__ import annotations

from pathlib import Path

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


def mount_at(directory: Path, mountinfo: str | None = None) -> tuple[str, str] | None:
    """(the folder of its filesystem that is mounted, the source) of the topmost mount at
    `directory` (resolved), from /proc/self/mountinfo; None when nothing is mounted there."""
    text = MOUNTINFO.read_text(errors="replace") if mountinfo is None else mountinfo
    found = None
    for line in text.splitlines():
        fields = line.split(" ")
        if len(fields) > 4 and _unescape(fields[4]) == str(directory) and "-" in fields:
            # The topmost one is listed last.
            found = (_unescape(fields[3]), fields[fields.index("-") + 2])
    return found
