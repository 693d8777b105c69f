"""The container's mount table against what was asked for (sandbox.mount_check)."""

from __future__ import annotations

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
