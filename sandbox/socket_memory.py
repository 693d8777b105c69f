"""Socket buffer memory of a container: bounded, and charged to the container.

On cgroup v1 the memory controller charges a process's TCP and UDP buffers to its cgroup only
once that cgroup has a TCP limit (`memory.kmem.tcp.limit_in_bytes`). Docker does not set one
(runc ignores `KernelMemoryTCP`), so a command with nothing but a loopback interface could hold
the host's socket memory outside its memory limit: about 10 MB per loopback connection whose
buffers it fills, up to the host-wide `tcp_mem` (gigabytes), after which every TCP socket on the
host is starved (attacker round 105). The daemon writes that limit once the container has
started and before any request reaches it, so every socket its commands make is charged to it and
bounded. The buffers are a counter of their own beside the memory limit, so a call reserves both
(`reserved_mb`). On cgroup v2 socket memory is part of the memory limit already: nothing to do.
"""

from __future__ import annotations

import errno
import functools
from pathlib import Path

SOCKET_BUFFERS_MAX_MB = 64
"""Ceiling on a container's socket buffers (a 100 MB download through them still flows: a full
buffer only makes the sender wait)."""
SOCKET_BUFFERS_MIN_MB = 4
_TCP_LIMIT = "memory.kmem.tcp.limit_in_bytes"


def socket_buffers_mb(memory_mb: int) -> int:
    """A container's socket buffers: an eighth of its memory limit, within the bounds above."""
    return max(SOCKET_BUFFERS_MIN_MB, min(SOCKET_BUFFERS_MAX_MB, memory_mb // 8))


def reserved_mb(memory_mb: int) -> int:
    """What a container with this memory limit can make the host hold: the limit, and its
    socket buffers beside it."""
    return memory_mb + socket_buffers_mb(memory_mb)


def bound_socket_memory(
    container_id: str, pid: int, memory_mb: int, proc: Path = Path("/proc")
) -> bool:
    """Charge the sockets of container `container_id`, whose first process is `pid`, to its
    cgroup, within `socket_buffers_mb`. False when nothing could be bounded: this process sees
    neither the container's processes (a PID namespace of its own) nor its cgroup where the
    engine makes it, or may not write there (not root, or /sys/fs/cgroup read-only, as under
    the shipped systemd unit).

    Raises:
        OSError: The cgroup v1 memory controller is there but the container's TCP limit cannot
            be set, or `pid` is not in a cgroup of that container (it ended, and the number is
            another process's now): the container must not run, its socket memory would be the
            host's.
    """
    try:
        folder = _v1_memory_cgroup(pid, proc)
    except FileNotFoundError:
        folder = _engine_cgroup(container_id, proc)
        if folder is None:
            return False
    if folder is None:
        return True  # cgroup v2: socket memory is in memory.max already
    if container_id not in folder.name:
        raise OSError(f"process {pid} is not in a cgroup of container {container_id[:12]}")
    limit = folder / _TCP_LIMIT
    try:
        limit.write_text(str(socket_buffers_mb(memory_mb) << 20), encoding="ascii")
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            return False  # not this process's to write (an unprivileged or confined daemon)
        raise
    return True


def _engine_cgroup(container_id: str, proc: Path) -> Path | None:
    """Where Docker makes a container's v1 memory cgroup (the cgroupfs driver's `docker/<id>`,
    the systemd driver's `system.slice/docker-<id>.scope`) in the hierarchy mounted here; None
    when neither is there."""
    mount = _v1_memory_mount(proc)
    if mount is None:
        return None
    for relative in (f"docker/{container_id}", f"system.slice/docker-{container_id}.scope"):
        if (mount / relative / _TCP_LIMIT).exists():
            return mount / relative
    return None


def _v1_memory_mount(proc: Path) -> Path | None:
    """Where the whole v1 memory hierarchy is mounted here (its root), if it is."""
    return next((Path(point) for root, point in _v1_memory_mounts(proc) if root == "/"), None)


@functools.lru_cache(maxsize=4)
def _v1_memory_mounts(proc: Path) -> tuple[tuple[str, str], ...]:
    """The v1 memory hierarchy's mounts here: (the hierarchy's folder mounted, mount point).
    Read once: cgroup hierarchies are mounted at boot, and every container start looks."""
    mounts = []
    for line in (proc / "self" / "mountinfo").read_text(encoding="utf-8").splitlines():
        fields, _, after = line.partition(" - ")
        parts, kind = fields.split(), after.split()
        v1_memory = len(kind) >= 3 and kind[0] == "cgroup" and "memory" in kind[2].split(",")
        if v1_memory and len(parts) >= 5:
            mounts.append((parts[3], parts[4]))
    return tuple(mounts)


def _v1_memory_cgroup(pid: int, proc: Path) -> Path | None:
    """The folder of `pid`'s cgroup in the v1 memory hierarchy; None when the memory controller
    is on cgroup v2 (there is no v1 memory line).

    Raises:
        OSError: There is a v1 memory line but its hierarchy is not mounted where it can be
            found.
    """
    relative = None
    for line in (proc / str(pid) / "cgroup").read_text(encoding="utf-8").splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            relative = path
            break
    if relative is None:
        return None
    for root, mount_point in _v1_memory_mounts(proc):
        inside = _relative_to(relative, root)
        if inside is not None:
            return Path(mount_point, inside)
    raise OSError(f"the cgroup v1 memory hierarchy holding {relative} is not mounted here")


def _relative_to(path: str, root: str) -> str | None:
    """`path` below the mount's `root`, as a relative path; None when it is not below it."""
    if root == "/":
        return path.lstrip("/")
    if path == root or path.startswith(root.rstrip("/") + "/"):
        return path[len(root) :].lstrip("/")
    return None
