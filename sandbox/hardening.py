"""The configuration of every sandbox container, as one pure function.

Everything that makes a container safe is decided here and nowhere else, so a unit test can read
the whole recipe and an integration test can compare it with what the engine actually applied.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from docker.types import LogConfig, Mount, Ulimit

from sandbox.backend import (
    LABEL_INSTANCE,
    LABEL_MANAGED,
    LABEL_SESSION,
    LABEL_TOOL_USE,
    NetworkMode,
    SandboxSpec,
)
from sandbox.runner.forward import proxy_environment

#: Where the runner's folder appears inside the container (read-only), and the script that starts
#: the runner in it (start.py: it imports runner.py, see there).
RUNNER_DIR = "/opt/tooljail"
RUNNER_PATH = f"{RUNNER_DIR}/start.py"
#: The only capabilities left, and only to the runner (root inside the container): to switch to
#: the command's identity and to signal the command's processes. The command itself has none.
RUNNER_CAPABILITIES = ["SETUID", "SETGID", "KILL"]
# The command starts as the OOM killer's first choice, but it may lower its score back to 0 (a
# floor needs CAP_SYS_RESOURCE, which engines do not always have to give). So what a command can
# leave behind to hold the container's memory after it is killed is bounded instead, and the
# runner keeps room to answer:
#: shared memory goes with its last user, and message queues are few;
IPC_SYSCTLS = {"kernel.shm_rmid_forced": "1", "kernel.msgmni": "16"}
#: Kernel memory of sockets no memory cgroup is charged for is kept small in the container's own
#: network namespace. A connection the container has not accepted yet is charged at accept only:
#: its receive buffer starts at 16 KiB and nothing (autotuning, SO_RCVLOWAT) grows it past 1 MiB
#: (the host's 32 MiB let one hold about 20 MB: attacker round 107; 64 KiB, 66 KB: round 108).
#: A socket's option memory (TCP MD5 keys, IP options, multicast filters) is not charged either:
#: 20 KiB per socket, not the host's 128 KiB (round 108: 180 KB per socket through MD5 keys).
#: Send buffers stop at 1 MiB too: where the daemon cannot set the container's TCP limit (see
#: sandbox/socket_memory.py), they are not charged to it either.
NET_SYSCTLS = {
    "net.ipv4.tcp_rmem": "4096 16384 1048576",
    "net.ipv4.tcp_wmem": "4096 16384 1048576",
    "net.core.optmem_max": "20480",
}
#: /tmp holds at most half the memory, and as many files and folders as it has 4 KiB pages (the
#: kernel memory of empty folders counts too, not only bytes).
TMPFS_INODES_PER_MB = 256

#: The whole environment of a container: nothing of the daemon's own environment leaks in.
SAFE_ENV: dict[str, str] = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    # The container's own tmpfs, the only writable place besides the workspace.
    "HOME": "/tmp",  # noqa: S108
    "TMPDIR": "/tmp",  # noqa: S108
    "LANG": "C.UTF-8",
    "TERM": "dumb",
    # Nothing may wait for a human: pagers and credential prompts would hang until the timeout.
    "PAGER": "cat",
    "GIT_PAGER": "cat",
    "GIT_TERMINAL_PROMPT": "0",
}
SHARED_UMASK = "0022"
"""Commands in a workspace principals share through its group make what the others may read but
not change (attacker round 136: a tenant changed another's repository, group-writable under
umask 0002, and its drivers ran in the other's git)."""
#: In a workspace principals share, each sandbox's git takes from a repository no file-system
#: monitor and no hooks, and never a folder laid out as a bare one; and git's own rule stands: it
#: refuses a repository another uid owns ("dubious ownership"), at the shared root (the sandbox
#: account's) too. Command-line scope, which a repository's configuration does not override.
SHARED_GIT_ENV = {
    "GIT_CONFIG_COUNT": "3",
    # Never a folder taken for a bare repository because it is laid out as one: in a shared
    # workspace another tenant may have laid out any folder so (attacker round 132: the root,
    # behind an empty `.git`, ran a program in every other tenant's `git status`).
    "GIT_CONFIG_KEY_0": "safe.bareRepository",
    "GIT_CONFIG_VALUE_0": "explicit",
    # No repository's file-system monitor or hooks: what git runs by itself in `git status` and
    # `git commit` (rounds 132 to 135: another tenant's ran, also from where the audit's look
    # does not reach: a nested repository, a `.git` swapped in and back during the call). Empty
    # turns the monitor off; hooks are looked for in a file, where none can be.
    "GIT_CONFIG_KEY_1": "core.fsmonitor",
    "GIT_CONFIG_VALUE_1": "",
    "GIT_CONFIG_KEY_2": "core.hooksPath",
    "GIT_CONFIG_VALUE_2": "/dev/null",
}

_MIB = 1 << 20

#: Where an egress container finds the daemon's proxy socket (the host folder, read-only).
TMP_DIR = "/tmp"  # noqa: S108 - the container's own, a tmpfs
"""The container's only writable folder besides the workspace."""
EGRESS_DIR = "/run/tooljail-egress"
EGRESS_SOCKET_NAME = "proxy.sock"
#: The image's trust store (Debian's path), replaced by the system roots plus tooljail's CA.
CA_BUNDLE_TARGET = "/etc/ssl/certs/ca-certificates.crt"
#: Every variable by which a common client takes a CA bundle (OpenSSL, requests, Node, git, pip).
CA_BUNDLE_VARIABLES = (
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO",
    "PIP_CERT",
)


@dataclass(frozen=True)
class EgressMounts:
    """What an egress container gets from the host beyond the usual."""

    folder: Path
    """Host folder (one per container) where the daemon listens for this container's proxy
    connections; mounted read-only at EGRESS_DIR."""
    ca_bundle: Path | None = None
    """Host file with the system roots and tooljail's CA (for intercepted destinations)."""


@dataclass(frozen=True)
class ContainerRecipe:
    """Arguments for the docker SDK's low-level `create_container` and `create_host_config`."""

    create_kwargs: dict[str, Any]
    """Passed to `APIClient.create_container` (with `host_config` added)."""
    host_config_kwargs: dict[str, Any]
    """Passed to `APIClient.create_host_config`."""


def container_labels(
    spec: SandboxSpec, *, instance_id: str, tool_use_id: str = ""
) -> dict[str, str]:
    """The labels that let every container be found and reaped."""
    return {
        LABEL_MANAGED: "true",
        LABEL_INSTANCE: instance_id,
        LABEL_SESSION: spec.session_id,
        LABEL_TOOL_USE: tool_use_id,
    }


def container_recipe(
    spec: SandboxSpec,
    *,
    image: str,
    runner_source: Path,
    instance_id: str,
    tool_use_id: str = "",
    idle_exit_s: int = 900,
    egress: EgressMounts | None = None,
    sources: Mapping[str, str] | None = None,
) -> ContainerRecipe:
    """The hardened configuration of a container that runs the runner for one request.

    Args:
        spec: Workspace, limits and session of the call.
        image: Image reference to run.
        runner_source: Host folder of the runner, mounted read-only at `RUNNER_DIR`.
        instance_id: The daemon instance (label) that owns the container.
        tool_use_id: The call the container serves, when known at creation (label).
        idle_exit_s: The runner exits (and the container is removed) when no request arrived in
            this time: a last line of defence should the daemon forget a pooled container.
        egress: Required exactly when the limits grant the egress network: the proxy's folder
            (and CA bundle) the container is given; it has no network interface but loopback.
        sources: Where the engine finds the workspace and each pin instead of at their own
            paths (`sandbox.source_stage`): the objects the daemon checked, bound by descriptor.
    """
    if spec.run_as is None or spec.run_as[0] <= 0 or spec.run_as[1] <= 0:
        raise ValueError(f"a sandbox never runs commands as root or group 0 (run_as {spec.run_as})")
    limits = spec.limits
    if (egress is not None) != (limits.network == NetworkMode.EGRESS):
        raise ValueError("the egress network needs the proxy's folder, and only it does")
    workspace = str(spec.workspace)
    run_as = f"{spec.run_as[0]}:{spec.run_as[1]}"
    memory = limits.memory_mb * _MIB
    file_size = limits.file_size_mb * _MIB
    tmpfs_mb = max(1, min(limits.tmpfs_mb, limits.memory_mb // 2))
    tmpfs = f"rw,nosuid,nodev,size={tmpfs_mb}m,nr_inodes={tmpfs_mb * TMPFS_INODES_PER_MB},mode=1777"
    create_kwargs: dict[str, Any] = {
        "image": image,
        # -E -s -S rather than -I: the runner's own (read-only) folder must be on sys.path.
        "command": [
            "python3",
            "-E",
            "-s",
            "-S",
            RUNNER_PATH,
            "--idle-exit-s",
            str(idle_exit_s),
            "--end-leftovers",
            *([] if spec.no_root else ["--run-as", run_as]),
            *(["--egress-socket", f"{EGRESS_DIR}/{EGRESS_SOCKET_NAME}"] if egress else []),
            *(["--umask", SHARED_UMASK] if spec.group_shared else []),
        ],
        # The runner is the container's root; the command runs as `run_as` (see runner.py).
        # Over a workspace a host account can change, `run_as` throughout (SandboxSpec.no_root).
        "user": run_as if spec.no_root else "0:0",
        "environment": {
            **SAFE_ENV,
            **_egress_environment(egress),
            **(SHARED_GIT_ENV if spec.group_shared else {}),
        },
        "working_dir": workspace,
        "labels": container_labels(spec, instance_id=instance_id, tool_use_id=tool_use_id),
        # stdin open and attached: the request goes in there. StdinOnce (set by the SDK with
        # these) closes it when the daemon's attach connection drops, so the runner of a daemon
        # that died exits and its container removes itself.
        "stdin_open": True,
        "tty": False,
        "detach": False,
        # Otherwise the SDK injects proxy variables from the daemon user's Docker config.
        "use_config_proxy": False,
    }
    host_config_kwargs: dict[str, Any] = {
        "mounts": [
            Mount(
                target=workspace,
                source=(sources or {}).get(workspace, workspace),
                type="bind",
                read_only=spec.read_only_workspace,
            ),
            *_pinned_mounts(spec, sources or {}),
            Mount(target=RUNNER_DIR, source=str(runner_source), type="bind", read_only=True),
            *_egress_mounts(egress),
        ],
        "cap_drop": ["ALL"],
        "cap_add": [] if spec.no_root else list(RUNNER_CAPABILITIES),
        "security_opt": ["no-new-privileges"],
        "read_only": True,
        "tmpfs": {TMP_DIR: tmpfs},
        # egress too: no interface but loopback; the proxy is reached through EGRESS_DIR.
        "network_mode": "bridge" if limits.network == NetworkMode.BRIDGE else "none",
        "ipc_mode": "private",
        "sysctls": {**IPC_SYSCTLS, **NET_SYSCTLS},
        "pids_limit": limits.pids,
        "mem_limit": memory,
        "memswap_limit": memory,  # equal: no swap at all
        "nano_cpus": round(limits.cpus * 1e9),
        "ulimits": [
            Ulimit(name="fsize", soft=file_size, hard=file_size),
            # Crashing programs must not drop core files into the workspace.
            Ulimit(name="core", soft=0, hard=0),
        ],
        # An init of `run_as` would hold the answer's stream where the command (the same uid)
        # could write it; the runner, not dumpable, is the first process then and reaps.
        "init": not spec.no_root,
        # Output reaches the daemon through the attach stream; logging it again would cost disk
        # and time for nothing.
        "log_config": LogConfig(type="none"),
        # The engine removes the container once the runner exits, even if the daemon is gone;
        # the daemon removes it itself in every case too.
        "auto_remove": True,
    }
    return ContainerRecipe(create_kwargs=create_kwargs, host_config_kwargs=host_config_kwargs)


def _egress_environment(egress: EgressMounts | None) -> dict[str, str]:
    if egress is None:
        return {}
    env = proxy_environment()
    if egress.ca_bundle is not None:
        env.update(dict.fromkeys(CA_BUNDLE_VARIABLES, CA_BUNDLE_TARGET))
    return env


def _pinned_mounts(spec: SandboxSpec, sources: Mapping[str, str]) -> list[Mount]:
    """Each pinned path over itself: a mount point, it cannot be renamed or replaced; read-only,
    nothing in it can be written. Given by path, the engine follows a symbolic link swapped in
    meanwhile (the runner then finds another object there than the pin's and refuses); staged,
    it mounts the object the daemon checked."""
    return [
        Mount(
            target=pin.path,
            source=sources.get(pin.path, pin.path),
            type="bind",
            read_only=pin.read_only,
        )
        for pin in spec.git_pins
    ]


def egress_targets(egress: EgressMounts) -> list[str]:
    """Where an egress container's extra mounts go."""
    return [str(mount["Target"]) for mount in _egress_mounts(egress)]


def _egress_mounts(egress: EgressMounts | None) -> list[Mount]:
    if egress is None:
        return []
    mounts = [Mount(target=EGRESS_DIR, source=str(egress.folder), type="bind", read_only=True)]
    if egress.ca_bundle is not None:
        mounts.append(
            Mount(
                target=CA_BUNDLE_TARGET,
                source=str(egress.ca_bundle),
                type="bind",
                read_only=True,
            )
        )
    return mounts
