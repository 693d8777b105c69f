"""The container's mount table against what was asked for (sandbox.mount_check)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sandbox import docker_backend
from sandbox.backend import SET_UP_CHANGED, SandboxSpec, SandboxStartError
from sandbox.mount_check import misplaced, mount_points

WS = "/srv/ws"
PINS = [f"{WS}/.git", f"{WS}/sub/.git"]
OURS = ["/opt/tooljail", "/tmp"]
#: As a container of this engine lists them (root, mount point: the fields that matter here).
NORMAL = [
    "/",
    "/proc",
    "/dev",
    "/dev/pts",
    "/sys",
    "/sys/fs/cgroup",
    "/sys/fs/cgroup/memory",
    "/dev/mqueue",
    "/dev/shm",
    "/usr/sbin/docker-init",
    "/tmp",
    "/opt/tooljail",
    "/etc/resolv.conf",
    "/etc/hostname",
    "/etc/hosts",
    WS,
    *PINS,
    "/proc/bus",
    "/proc/keys",
    "/sys/firmware",
]


def test_a_container_mounted_as_asked_passes() -> None:
    assert misplaced(NORMAL, WS, PINS, OURS) == ""


def test_a_pin_steered_onto_the_interpreter_is_refused() -> None:
    """Attacker round 118: the pin's link resolved to /usr/lib/python3.11 in the container."""
    points = [p for p in NORMAL if p != PINS[0]] + ["/usr/lib/python3.11"]
    assert "/usr/lib/python3.11 is mounted" in misplaced(points, WS, PINS, OURS)


def test_a_pin_stacked_on_another_mount_or_elsewhere_in_the_workspace_is_refused() -> None:
    assert "mounted twice" in misplaced([*NORMAL, "/opt/tooljail"], WS, PINS, OURS)
    assert "mounted twice" in misplaced([*NORMAL, "/proc/sys", "/proc/sys"], WS, PINS, OURS)
    # Two pins swapped for links to each other's place: both places mounted, once each, but
    # one pin's own place then holds nothing.
    moved = [p for p in NORMAL if p != PINS[1]] + [f"{WS}/elsewhere"]
    assert f"{WS}/elsewhere is mounted" in misplaced(moved, WS, PINS, OURS)
    missing = [p for p in NORMAL if p != PINS[1]]
    assert f"{PINS[1]} is not mounted" in misplaced(missing, WS, PINS, OURS)


def test_mount_points_are_read_unescaped_from_the_fifth_field() -> None:
    table = (
        "36 35 98:0 /mnt1 /mnt/with\\040space rw,noatime master:1 - ext3 /dev/root rw\n"
        "37 35 98:0 / / rw - ext4 /dev/root rw\n"
    )
    assert mount_points(table) == ["/mnt/with space", "/"]


def test_the_hosts_own_mounts_below_the_workspace_come_along() -> None:
    """A folder of the workspace that is a mount of its own on the host (a tmpfs, a disk) is in
    the container too: the workspace's mount takes it along."""
    host = f"{WS}/small"
    assert misplaced([*NORMAL, host], WS, PINS, OURS, submounts=[host]) == ""
    assert f"{host} is mounted" in misplaced([*NORMAL, host], WS, PINS, OURS)
    assert "mounted twice" in misplaced([*NORMAL, host, host], WS, PINS, OURS, submounts=[host])


class _RunningEngine:
    """An engine that still says a container runs (it lags behind one that ended at once)."""

    def inspect_container(self, container_id: str) -> dict[str, Any]:
        return {"State": {"Running": True, "Pid": 4242}}


def test_a_table_gone_after_others_were_read_is_a_container_that_ended(
    backend_over: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A daemon that cannot read containers' mount tables relies on the runner's own check; one
    that read one before can read them all, so a missing one is a container that ended as it
    started, even while the engine still says it runs: refused, not let through unchecked."""
    backend = backend_over(_RunningEngine())
    spec = SandboxSpec(workspace=tmp_path)
    tables: list[list[str] | OSError] = [
        FileNotFoundError(2, "gone"),
        [],
        FileNotFoundError(2, "gone"),
    ]

    def read(pid: int) -> list[str]:
        got = tables.pop(0)
        if isinstance(got, OSError):
            raise got
        return got

    monkeypatch.setattr(docker_backend, "read_mount_points", read)
    monkeypatch.setattr(docker_backend, "misplaced", lambda *args: "")
    backend._check_mounts("c1", 4242, spec, None)  # never read one: cannot tell, let through
    backend._check_mounts("c2", 4243, spec, None)
    with pytest.raises(SandboxStartError) as refused:
        backend._check_mounts("c3", 4244, spec, None)
    assert str(refused.value) == SET_UP_CHANGED
