"""bound_socket_memory: the TCP limit goes into the container's own v1 memory cgroup, found
through the kernel's view of its first process; anything else is refused."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from sandbox.socket_memory import bound_socket_memory, reserved_mb, socket_buffers_mb

CID = "93992ff670d830209b4e16850126f3627256acf1b9d86300ad3e89ca35e44b9e"
V1_MOUNTS = (
    "25 1 0:23 / /sys/fs/cgroup ro,nosuid shared:9 - tmpfs tmpfs ro,mode=755\n"
    "30 25 0:26 / /sys/fs/cgroup/unified rw shared:10 - cgroup2 cgroup2 rw\n"
    "35 25 0:30 / {mount} rw,nosuid,nodev shared:15 - cgroup cgroup rw,memory\n"
    "36 25 0:31 / /sys/fs/cgroup/pids rw shared:16 - cgroup cgroup rw,pids\n"
)


def fake_proc(tmp_path: Path, cgroup: str, mountinfo: str) -> Path:
    proc = tmp_path / "proc"
    (proc / "4242").mkdir(parents=True)
    (proc / "self").mkdir()
    (proc / "4242" / "cgroup").write_text(cgroup, encoding="utf-8")
    (proc / "self" / "mountinfo").write_text(mountinfo, encoding="utf-8")
    return proc


def test_the_limit_is_written_in_the_containers_memory_cgroup(tmp_path: Path) -> None:
    mount = tmp_path / "memory"
    folder = mount / "docker" / CID
    folder.mkdir(parents=True)
    proc = fake_proc(
        tmp_path,
        f"12:pids:/docker/{CID}\n4:memory:/docker/{CID}\n0::/system.slice/docker.service\n",
        V1_MOUNTS.format(mount=mount),
    )
    bound_socket_memory(CID, 4242, 512, proc)
    written = (folder / "memory.kmem.tcp.limit_in_bytes").read_text(encoding="ascii")
    assert int(written) == socket_buffers_mb(512) << 20 == 64 << 20


def test_a_process_in_another_cgroup_is_refused(tmp_path: Path) -> None:
    """The first process ended and its number went to another process: not its cgroup."""
    mount = tmp_path / "memory"
    (mount / "system.slice").mkdir(parents=True)
    proc = fake_proc(tmp_path, "4:memory:/system.slice\n", V1_MOUNTS.format(mount=mount))
    with pytest.raises(OSError, match="not in a cgroup of container 93992ff670d8"):
        bound_socket_memory(CID, 4242, 512, proc)
    assert not (mount / "system.slice" / "memory.kmem.tcp.limit_in_bytes").exists()


def test_a_v1_memory_controller_not_mounted_here_is_refused(tmp_path: Path) -> None:
    mounts = "30 25 0:26 / /sys/fs/cgroup/unified rw shared:10 - cgroup2 cgroup2 rw\n"
    proc = fake_proc(tmp_path, f"4:memory:/docker/{CID}\n", mounts)
    with pytest.raises(OSError, match="not mounted here"):
        bound_socket_memory(CID, 4242, 512, proc)


def test_a_mount_of_a_sub_hierarchy_is_followed(tmp_path: Path) -> None:
    mount = tmp_path / "memory"
    folder = mount / CID
    folder.mkdir(parents=True)
    mounts = f"35 25 0:30 /docker {mount} rw - cgroup cgroup rw,memory\n"
    proc = fake_proc(tmp_path, f"4:memory:/docker/{CID}\n", mounts)
    bound_socket_memory(CID, 4242, 64, proc)
    assert (folder / "memory.kmem.tcp.limit_in_bytes").read_text() == str(8 << 20)


def test_on_cgroup_v2_there_is_nothing_to_write(tmp_path: Path) -> None:
    proc = fake_proc(
        tmp_path,
        f"0::/system.slice/docker-{CID}.scope\n",
        "30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
    )
    bound_socket_memory(CID, 4242, 512, proc)  # socket memory counts in memory.max there


def test_a_container_reserves_its_socket_buffers_beside_its_memory() -> None:
    assert socket_buffers_mb(16) == 4
    assert socket_buffers_mb(256) == 32
    assert socket_buffers_mb(4096) == 64
    assert reserved_mb(512) == 576


def test_without_the_containers_process_its_cgroup_is_found_where_the_engine_makes_it(
    tmp_path: Path,
) -> None:
    """The daemon in a PID namespace of its own (in a container) cannot read /proc/<pid>."""
    mount = tmp_path / "memory"
    folder = mount / "system.slice" / f"docker-{CID}.scope"
    folder.mkdir(parents=True)
    (folder / "memory.kmem.tcp.limit_in_bytes").write_text("9223372036854771712")
    proc = fake_proc(tmp_path, "", V1_MOUNTS.format(mount=mount))
    (proc / "4242" / "cgroup").unlink()
    assert bound_socket_memory(CID, 4242, 512, proc) is True
    assert (folder / "memory.kmem.tcp.limit_in_bytes").read_text() == str(64 << 20)


def test_a_daemon_that_sees_neither_says_nothing_was_bounded(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, "", V1_MOUNTS.format(mount=tmp_path / "memory"))
    (proc / "4242" / "cgroup").unlink()
    assert bound_socket_memory(CID, 4242, 512, proc) is False


@pytest.mark.parametrize("refusal", [errno.EACCES, errno.EROFS])
def test_a_daemon_that_may_not_write_the_cgroup_says_nothing_was_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, refusal: int
) -> None:
    """As under the shipped unit: an unprivileged user, /sys/fs/cgroup read-only."""
    mount = tmp_path / "memory"
    (mount / "docker" / CID).mkdir(parents=True)
    proc = fake_proc(tmp_path, f"4:memory:/docker/{CID}\n", V1_MOUNTS.format(mount=mount))

    def refused(self: Path, *args: object, **kwargs: object) -> int:
        raise OSError(refusal, os.strerror(refusal), str(self))

    monkeypatch.setattr(Path, "write_text", refused)
    assert bound_socket_memory(CID, 4242, 512, proc) is False
