"""Where a started container's mounts landed, checked from the host before any request reaches it.

The engine is given each pinned path of the workspace's repository as a mount's source and its
target, and both sides follow a symbolic link swapped in meanwhile: the engine on the host, the
runtime inside the container (within its root). A tenant flipping `.git` between a folder and a
link whose `..` steps resolve differently in the two places had its own folder mounted over the
container's `/usr/lib/python3.11` (attacker round 118): over the runner's own interpreter, whose
check of the mounts then never ran. So the daemon reads the container's mount table itself: every
mount must sit where it was asked for, once.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

#: What the engine mounts itself besides ours (the init process's binary, seen through the
#: image's /sbin link or not, and the files it writes for the network).
ENGINE_MOUNTS = frozenset(
    {
        "/",
        "/sbin/docker-init",
        "/usr/sbin/docker-init",
        "/etc/resolv.conf",
        "/etc/hostname",
        "/etc/hosts",
    }
)
#: The kernel's and the engine's own trees, where our mounts never go and a misplaced one would
#: cover nothing the runner runs.
_KERNEL_TREES = ("/proc", "/sys", "/dev")


def mount_points(mountinfo: str) -> list[str]:
    """The mount points of a /proc/<pid>/mountinfo text, unescaped (spaces and the like are
    written as octal escapes there)."""
    points = []
    for line in mountinfo.splitlines():
        fields = line.split(" ")
        if len(fields) > 4:
            points.append(_unescaped(fields[4]))
    return points


def misplaced(
    points: Iterable[str],
    workspace: str,
    pins: Iterable[str],
    ours: Iterable[str],
    submounts: Iterable[str] = (),
) -> str:
    """Why the container's mount points are not exactly what was asked for; "" when they are.

    `workspace` and `pins` (below it) must each be a mount point; below the workspace nothing
    else may be mounted but the host's own `submounts` there (the workspace's mount takes them
    along); outside it, only `ours` (the runner's folder, the egress ones), the engine's own and
    the kernel's trees; and no place twice (a second mount hides the first)."""
    wanted = {workspace, *pins}
    allowed = {*ENGINE_MOUNTS, *ours}
    below_ok = set(submounts)
    seen: set[str] = set()
    for point in points:
        if point in seen:
            return f"{point} is mounted twice"
        seen.add(point)
        if point in wanted:
            continue
        if _below(point, workspace):
            if point in below_ok:
                continue
            return f"{point} is mounted though nothing was asked for there"
        if point not in allowed and not any(_below(point, tree) for tree in _KERNEL_TREES):
            return f"{point} is mounted though nothing was asked for there"
    missing = sorted(wanted - seen)
    return f"{missing[0]} is not mounted where it was asked for" if missing else ""


def _below(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _unescaped(text: str) -> str:
    if "\\" not in text:
        return text
    out, index = bytearray(), 0
    raw = text.encode("utf-8", "surrogateescape")
    while index < len(raw):
        if raw[index : index + 1] == b"\\" and raw[index + 1 : index + 4].isdigit():
            out.append(int(raw[index + 1 : index + 4], 8) & 0xFF)
            index += 4
        else:
            out.append(raw[index])
            index += 1
    return out.decode("utf-8", "surrogateescape")


def submounts_below(workspace: str, proc: Path = Path("/proc")) -> list[str]:
    """The host's mount points below `workspace`, as this process sees them."""
    return [p for p in read_mount_points("self", proc) if p != workspace and _below(p, workspace)]


def read_mount_points(pid: int | str, proc: Path = Path("/proc")) -> list[str]:
    """The mount points of process `pid` (OSError when they cannot be read)."""
    return mount_points(
        (proc / str(pid) / "mountinfo").read_text(encoding="utf-8", errors="surrogateescape")
    )
