"""Escapes from the sandbox, each attempted for real: Write and Edit of paths outside the
workspace and of symlinks pointing out (also swapped in while writing); Bash against resources, the
network, mounts, setuid binaries, the Docker socket, /tmp and its own runner. Each must fail and say
why; nothing outside may be changed, no container may be left."""

from __future__ import annotations

import hashlib
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from tests.integration.harness import RunningDaemon
from tests.reliability.conftest import Figure, Record
from tests.reliability.support import (
    OWNER_GID,
    OWNER_UID,
    execute,
    scaled,
    settle_containers,
    text_of,
)
from tests.reliability.swaps import Flipper, symlink

pytestmark = [pytest.mark.integration, pytest.mark.docker]


# --- Write and Edit in the sandbox -------------------------------------------------------------


@pytest.fixture
def sbx_outside(rel_tmp: Path, sbx_dir: Path) -> Path:
    folder = rel_tmp / f"outside-{sbx_dir.name}"
    folder.mkdir()
    (folder / "target.txt").write_text("outside, unchanged\n")
    return folder


def test_write_and_edit_cannot_reach_outside(
    rel_sandbox: RunningDaemon, sbx_dir: Path, sbx_outside: Path, record: Record
) -> None:
    target = sbx_outside / "target.txt"
    file_link = symlink(sbx_dir / "link-out", target)
    dir_link = symlink(sbx_dir / "dir-out", sbx_outside)
    dangling = symlink(sbx_dir / "dangling-out", sbx_outside / "created.txt")
    etc_link = symlink(sbx_dir / "etc-link", "/etc")
    for link in (file_link, dir_link, dangling, etc_link):
        os.lchown(link, OWNER_UID, OWNER_GID)
    writes: list[tuple[str, str, dict[str, Any]]] = [
        ("Write absolute", "Write", {"file_path": str(target), "content": "pwned\n"}),
        ("Write ..", "Write", {"file_path": f"{sbx_dir}/{os.path.relpath(sbx_outside, sbx_dir)}"
                                            "/new.txt", "content": "pwned\n"}),
        ("Write symlink", "Write", {"file_path": str(file_link), "content": "pwned\n"}),
        ("Write dangling symlink", "Write", {"file_path": str(dangling), "content": "pwned\n"}),
        ("Write via dir symlink", "Write", {"file_path": f"{dir_link}/new.txt",
                                            "content": "pwned\n"}),
        ("Write /etc via symlink", "Write", {"file_path": f"{etc_link}/tooljail-x",
                                             "content": "pwned\n"}),
        ("Write /tmp", "Write", {"file_path": "/tmp/tooljail-escape.txt", "content": "pwned\n"}),
        ("Edit symlink", "Edit", {"file_path": str(file_link), "old_string": "outside",
                                  "new_string": "pwned"}),
        ("Edit absolute", "Edit", {"file_path": str(target), "old_string": "outside",
                                   "new_string": "pwned"}),
        ("MultiEdit symlink", "MultiEdit", {"file_path": str(file_link), "edits": [
            {"old_string": "outside", "new_string": "pwned"}]}),
    ]  # fmt: skip
    # Read first, so that read-before-write is not what stops them.
    execute(rel_sandbox.stub, "Read", {"file_path": str(file_link)})
    execute(rel_sandbox.stub, "Read", {"file_path": str(target)})
    held = []
    failures = []
    for case, tool, tool_input in writes:
        answer = execute(rel_sandbox.stub, tool, tool_input)
        text = text_of(answer)
        if answer.result.is_error and "outside the workspace" in text:
            held.append(case)
        else:
            failures.append(f"{case}: {text[:300]}")
    record("Write/Edit outside the workspace", len(writes), len(held))
    assert not failures, failures
    assert target.read_text() == "outside, unchanged\n"
    assert sorted(p.name for p in sbx_outside.iterdir()) == ["target.txt"]
    assert not Path("/tmp/tooljail-escape.txt").exists()
    assert not Path("/etc/tooljail-x").exists()


def test_a_symlink_swapped_in_while_writing_never_writes_outside(
    rel_sandbox: RunningDaemon, sbx_dir: Path, sbx_outside: Path, record: Record, figure: Figure
) -> None:
    race = sbx_dir / "race"
    race.mkdir()
    real = race / "d"
    real.mkdir()
    swap = symlink(race / "swap", sbx_outside)
    for path in (race, real):
        os.chown(path, OWNER_UID, OWNER_GID)
    os.lchown(swap, OWNER_UID, OWNER_GID)
    attempts = scaled(15, 100)
    outcomes: Counter[str] = Counter()
    with Flipper(real, swap):
        for i in range(attempts):
            answer = execute(
                rel_sandbox.stub, "Write", {"file_path": f"{real}/target.txt", "content": f"{i}\n"}
            )
            outcomes["refused" if answer.result.is_error else "written inside"] += 1
    changed = (sbx_outside / "target.txt").read_text() != "outside, unchanged\n"
    extra = sorted(p.name for p in sbx_outside.iterdir() if p.name != "target.txt")
    record("symlink swapped during Write", attempts, 0 if changed or extra else attempts)
    figure("symlink race, Write", f"{attempts} calls: {dict(outcomes)}")
    assert not changed and not extra, f"written outside: {extra}"


# --- Bash in the sandbox -----------------------------------------------------------------------


def bash(daemon: RunningDaemon, command: str, timeout_ms: int = 30_000) -> pb.ExecuteResponse:
    answer = execute(daemon.stub, "Bash", {"command": command, "timeout": timeout_ms})
    assert answer.decision.outcome == pb.ALLOW, f"the policy did not allow it: {text_of(answer)}"
    return answer


@pytest.fixture
def bash_record(record: Record) -> Iterator[Callable[[bool], None]]:
    """Counts one Bash escape attempt per call; reported as one row."""
    held: list[bool] = []
    yield held.append
    record("Bash sandbox escapes", len(held), sum(held))


def test_fork_bomb_is_contained(
    rel_sandbox: RunningDaemon, bash_record: Callable[[bool], None]
) -> None:
    started = time.monotonic()
    bomb = bash(rel_sandbox, "bomb() { bomb | bomb & }; bomb; sleep 2; echo survived", 8_000)
    elapsed = time.monotonic() - started
    after = bash(rel_sandbox, "echo still fine")
    held = "fork" in text_of(bomb) and text_of(after).strip() == "still fine" and elapsed < 60
    bash_record(held)
    assert "fork" in text_of(bomb), "the bomb did not even run"
    assert elapsed < 60 and text_of(after).strip() == "still fine"
    keep = rel_sandbox.settings.sandbox.pool_size
    assert settle_containers(rel_sandbox.daemon.instance_id, keep=keep) <= keep


def test_memory_hog_is_killed_and_reported(
    rel_sandbox: RunningDaemon, bash_record: Callable[[bool], None]
) -> None:
    hog = bash(rel_sandbox, "python3 -c 'x = bytearray(1 << 30); print(len(x))'")
    held = hog.result.is_error and hog.report.oom_killed and "memory" in text_of(hog).lower()
    bash_record(held)
    assert held, text_of(hog)


def test_infinite_loop_is_stopped_at_its_timeout(
    rel_sandbox: RunningDaemon, bash_record: Callable[[bool], None]
) -> None:
    started = time.monotonic()
    loop = bash(rel_sandbox, "while :; do :; done", 2_000)
    elapsed = time.monotonic() - started
    held = loop.result.is_error and loop.report.timed_out and elapsed < 30
    bash_record(held)
    assert held, text_of(loop)
    assert "timed out" in text_of(loop)


def test_no_network_egress_is_possible(
    rel_sandbox: RunningDaemon, bash_record: Callable[[bool], None]
) -> None:
    """Proved by inspection only: nothing ever tries to connect anywhere."""
    interfaces = text_of(bash(rel_sandbox, "ls /sys/class/net")).split()
    ipv4_routes = text_of(bash(rel_sandbox, "tail -n +2 /proc/net/route")).strip()
    ipv6_devices = {
        line.split()[-1]
        for line in text_of(bash(rel_sandbox, "cat /proc/net/ipv6_route")).splitlines()
        if line.strip()
    }
    listening = text_of(
        bash(rel_sandbox, "tail -q -n +2 /proc/net/udp /proc/net/udp6 /proc/net/tcp")
    ).strip()
    resolv = text_of(bash(rel_sandbox, "cat /etc/resolv.conf 2>/dev/null || true"))
    servers = [line.split()[1] for line in resolv.splitlines() if line.startswith("nameserver")]
    loopback_servers = [s for s in servers if s.startswith("127.") or s == "::1"]
    held = (
        interfaces == ["lo"]
        and ipv4_routes in ("", "(no output)")
        and ipv6_devices <= {"lo"}
        # Any resolver is unreachable: off-host ones have no route, and nothing listens on lo.
        and (not loopback_servers or listening in ("", "(no output)"))
    )
    bash_record(held)
    assert interfaces == ["lo"]
    assert ipv4_routes in ("", "(no output)"), ipv4_routes
    assert ipv6_devices <= {"lo"}, ipv6_devices
    assert not loopback_servers or listening in ("", "(no output)"), listening


def test_writing_outside_the_workspace_fails(
    rel_sandbox: RunningDaemon, sbx_dir: Path, bash_record: Callable[[bool], None]
) -> None:
    escaped = sbx_dir.parent.parent / "escaped-by-bash.txt"
    answer = bash(
        rel_sandbox,
        "touch /etc/x /usr/x /x /opt/tooljail/runner.py /proc/sys/kernel/hostname "
        f"{escaped} 2>&1; echo done",
    )
    text = text_of(answer)
    refusals = text.count("Read-only file system") + text.count("Permission denied")
    created = bash(rel_sandbox, "ls /etc/x /usr/x /x 2>&1 | grep -c 'No such' || true")
    held = refusals == 6 and not escaped.exists() and text_of(created).strip() == "3"
    bash_record(held)
    assert refusals == 6, text
    assert not escaped.exists()
    assert text_of(created).strip() == "3"


def test_the_hosts_secrets_are_not_mounted(
    rel_sandbox: RunningDaemon, bash_record: Callable[[bool], None]
) -> None:
    host_shadow = hashlib.sha256(Path("/etc/shadow").read_bytes()).hexdigest()
    inside = text_of(bash(rel_sandbox, "sha256sum /etc/shadow 2>&1 || true"))
    mountinfo = text_of(bash(rel_sandbox, "cat /proc/self/mountinfo"))
    workspace = str(rel_sandbox.workspace.resolve())
    # Bind mounts from the host's disk: the workspace, the runner, and Docker's own files.
    allowed = {workspace, "/opt/tooljail", "/etc/resolv.conf", "/etc/hostname",
               "/etc/hosts", "/sbin/docker-init", "/usr/sbin/docker-init", "/dev/init"}  # fmt: skip
    virtual = {"proc", "tmpfs", "devpts", "sysfs", "cgroup", "cgroup2", "mqueue", "overlay"}
    unexpected = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        fs_type = line.split(" - ", 1)[1].split()[0]
        if fs_type not in virtual and fields[4] not in allowed:
            unexpected.append(f"{fields[4]} ({fs_type}, {fields[3]})")
    held = host_shadow not in inside and not unexpected
    bash_record(held)
    assert host_shadow not in inside
    assert "Permission denied" in inside or "sha256" not in inside
    assert not unexpected, unexpected


def test_setuid_binaries_gain_nothing(
    rel_sandbox: RunningDaemon, bash_record: Callable[[bool], None]
) -> None:
    status = text_of(
        bash(rel_sandbox, "grep -E '^(Uid|Cap[A-Za-z]+|NoNewPrivs):' /proc/self/status")
    )
    fields = dict(line.split(":", 1) for line in status.splitlines())
    setuid = text_of(bash(rel_sandbox, "find / -xdev -perm -4000 -type f 2>/dev/null || true"))
    # chage is setgid shadow: with no-new-privileges it cannot read /etc/shadow.
    chage = text_of(bash(rel_sandbox, "chage -l root 2>&1; echo rc=$?"))
    su = execute(rel_sandbox.stub, "Bash", {"command": "su -c id"})
    # The command holds no capability; its bounding set keeps at most the runner's three
    # (SETUID, SETGID, KILL: 0xe0), which no_new_privs keeps it from ever gaining.
    caps_zero = all(int(fields[name].strip(), 16) == 0 for name in ("CapEff", "CapPrm", "CapAmb"))
    caps_zero = caps_zero and int(fields["CapBnd"].strip(), 16) & ~0xE0 == 0
    held = (
        fields["NoNewPrivs"].strip() == "1"
        and caps_zero
        and fields["Uid"].split() == [str(OWNER_UID)] * 4
        and "rc=0" not in chage
        and su.decision.outcome == pb.DENY
    )
    bash_record(held)
    assert fields["NoNewPrivs"].strip() == "1" and caps_zero, status
    assert fields["Uid"].split() == [str(OWNER_UID)] * 4
    assert "rc=0" not in chage and "shadow" in chage, chage
    assert su.decision.outcome == pb.DENY and "raise privileges" in text_of(su)
    assert "/usr/bin/su" in setuid.split() or not setuid.strip() or "(no output)" in setuid


def test_no_docker_socket_or_other_socket_is_reachable(
    rel_sandbox: RunningDaemon, bash_record: Callable[[bool], None]
) -> None:
    found = text_of(
        bash(
            rel_sandbox,
            "ls -la /var/run/docker.sock /run/docker.sock 2>&1; "
            "find / -xdev -type s 2>/dev/null; echo end",
        )
    )
    held = found.count("No such file or directory") == 2 and found.strip().endswith("end")
    bash_record(held)
    assert found.count("No such file or directory") == 2, found
    assert found.split("\n")[-2:] in (["end", ""], ["end"]) or found.strip().endswith("end")
    assert "docker.sock" not in found.replace("cannot access", "").split("No such")[-1]


def test_filling_tmp_stops_at_its_size_and_the_sandbox_carries_on(
    rel_sandbox: RunningDaemon, bash_record: Callable[[bool], None]
) -> None:
    answer = bash(
        rel_sandbox, "dd if=/dev/zero of=/tmp/fill bs=1M count=1000 2>&1; echo carried-on"
    )
    after = bash(rel_sandbox, "df -k /tmp | tail -n 1; echo fine")
    text = text_of(answer)
    held = "No space left on device" in text and "carried-on" in text and "fine" in text_of(after)
    bash_record(held)
    assert "No space left on device" in text and "carried-on" in text, text
    assert "fine" in text_of(after)


def test_the_command_cannot_kill_its_runner_and_nothing_leaks(
    rel_sandbox: RunningDaemon, bash_record: Callable[[bool], None]
) -> None:
    # The runner and init are root's: the command (another uid) may not signal them (EPERM).
    # In a container with no root (a workspace a host account can change), the runner is the
    # first process, and the kernel drops the signals it does not handle (kill says nothing).
    killed = bash(rel_sandbox, "kill -9 $PPID; kill -STOP $PPID; echo after")
    init = bash(rel_sandbox, "kill -9 1; echo init ignores it")
    text = text_of(killed)
    keep = rel_sandbox.settings.sandbox.pool_size
    left = settle_containers(rel_sandbox.daemon.instance_id, keep=keep)
    held = (
        not killed.result.is_error
        and text.count("Operation not permitted") in (0, 2)
        and text.endswith("after\n")
        and "init ignores it" in text_of(init)
        and left <= keep
    )
    bash_record(held)
    assert not killed.result.is_error, text  # the runner answered: it was neither killed
    assert text.count("Operation not permitted") in (0, 2), text  # nor stopped
    assert text.endswith("after\n")
    assert "init ignores it" in text_of(init)
    assert left <= keep


def test_the_sandbox_cannot_hard_link_host_files_into_the_workspace(
    rel_sandbox: RunningDaemon, sbx_dir: Path, bash_record: Callable[[bool], None]
) -> None:
    answer = bash(rel_sandbox, f"ln /etc/passwd {sbx_dir}/passwd-link 2>&1")
    held = answer.result.is_error and not (sbx_dir / "passwd-link").exists()
    bash_record(held)
    assert "Invalid cross-device link" in text_of(answer) or "not permitted" in text_of(answer)
    assert not (sbx_dir / "passwd-link").exists()
