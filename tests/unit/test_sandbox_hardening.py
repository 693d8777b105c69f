"""Every container's configuration, read from the one function that decides it (no Docker)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import docker
import pytest

from sandbox.backend import (
    LABEL_INSTANCE,
    LABEL_MANAGED,
    LABEL_SESSION,
    LABEL_TOOL_USE,
    NetworkMode,
    SandboxLimits,
    SandboxSpec,
)
from sandbox.hardening import (
    RUNNER_DIR,
    RUNNER_PATH,
    SAFE_ENV,
    ContainerRecipe,
    container_recipe,
)

WORKSPACE = Path("/srv/work space:1")  # spaces and colons must survive (no "src:dst" parsing)
RUNNER = Path("/opt/pkg/runner")
DEFAULT_LIMITS = SandboxLimits()


def recipe_for(limits: SandboxLimits = DEFAULT_LIMITS, **kwargs: Any) -> ContainerRecipe:
    spec = SandboxSpec(workspace=WORKSPACE, run_as=(1234, 5678), limits=limits, session_id="sess-1")
    return container_recipe(
        spec, image="img:tag", runner_source=RUNNER, instance_id="inst-1", **kwargs
    )


def host_config(limits: SandboxLimits = DEFAULT_LIMITS) -> dict[str, Any]:
    """What the SDK sends to the engine for these limits (built offline, nothing is contacted)."""
    api = docker.APIClient(version="1.41")
    try:
        return dict(api.create_host_config(**recipe_for(limits).host_config_kwargs))
    finally:
        api.close()


def test_the_runner_is_root_in_the_workspace_and_runs_commands_as_run_as() -> None:
    create = recipe_for().create_kwargs
    assert create["user"] == "0:0"
    assert create["working_dir"] == str(WORKSPACE)
    assert create["command"][:5] == ["python3", "-E", "-s", "-S", RUNNER_PATH]
    assert create["command"][-2:] == ["--run-as", "1234:5678"]
    assert create["image"] == "img:tag"
    assert create["stdin_open"] is True and create["tty"] is False


def test_a_shared_workspace_gets_files_others_only_read_and_git_trusting_none() -> None:
    """Principals' default sessions run as uids of their own over the one default workspace:
    what one makes, the others may read but not change (round 136), and git takes no
    repository's monitor or hooks, nor a folder laid out as a bare repository, and trusts no
    other uid's repository (git's own rule, no `safe.directory`)."""
    alone = recipe_for().create_kwargs
    assert "--umask" not in alone["command"]
    assert "GIT_CONFIG_COUNT" not in alone["environment"]
    spec = SandboxSpec(workspace=WORKSPACE, run_as=(1234, 5678), group_shared=True)
    shared = container_recipe(
        spec, image="img:tag", runner_source=RUNNER, instance_id="inst-1"
    ).create_kwargs
    command = shared["command"]
    assert command[command.index("--umask") + 1] == "0022"
    environment = shared["environment"]
    count = int(environment["GIT_CONFIG_COUNT"])
    settings = {
        environment[f"GIT_CONFIG_KEY_{n}"]: environment[f"GIT_CONFIG_VALUE_{n}"]
        for n in range(count)
    }
    assert settings == {
        "safe.bareRepository": "explicit",  # round 132
        "core.fsmonitor": "",  # rounds 132 to 135
        "core.hooksPath": "/dev/null",
    }
    assert spec.profile_key() != spec.model_copy(update={"group_shared": False}).profile_key()


def test_the_runner_ends_the_calls_leftovers_in_a_pid_namespace_of_its_own() -> None:
    """--end-leftovers kills every process of the runner's PID namespace: the container's own,
    never the host's."""
    assert "--end-leftovers" in recipe_for().create_kwargs["command"]
    assert "PidMode" not in host_config()


def test_environment_is_exactly_the_safe_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "leak")
    monkeypatch.setenv("HTTP_PROXY", "http://proxy")
    create = recipe_for().create_kwargs
    assert create["environment"] == SAFE_ENV
    assert create["use_config_proxy"] is False
    assert SAFE_ENV["HOME"] == "/tmp"


def test_labels_name_instance_session_and_call() -> None:
    labels = recipe_for(tool_use_id="toolu_9").create_kwargs["labels"]
    assert labels == {
        LABEL_MANAGED: "true",
        LABEL_INSTANCE: "inst-1",
        LABEL_SESSION: "sess-1",
        LABEL_TOOL_USE: "toolu_9",
    }


def test_host_config_is_locked_down() -> None:
    hc = host_config()
    assert hc["CapDrop"] == ["ALL"]
    # Only for the runner (root in the container) to switch to the command's identity and
    # signal it; the command runs with none.
    assert hc["CapAdd"] == ["SETUID", "SETGID", "KILL"]
    assert hc["SecurityOpt"] == ["no-new-privileges"]
    assert hc["ReadonlyRootfs"] is True
    assert hc["Tmpfs"] == {"/tmp": "rw,nosuid,nodev,size=64m,nr_inodes=16384,mode=1777"}
    assert hc["NetworkMode"] == "none"
    assert hc["Init"] is True
    assert hc.get("Privileged", False) is False
    assert hc["IpcMode"] == "private"
    assert hc["Sysctls"] == {
        "kernel.shm_rmid_forced": "1",
        "kernel.msgmni": "16",
        "net.ipv4.tcp_rmem": "4096 16384 1048576",
        "net.ipv4.tcp_wmem": "4096 16384 1048576",
        "net.core.optmem_max": "20480",
    }
    assert hc["AutoRemove"] is True
    assert hc["LogConfig"] == {"Type": "none", "Config": {}}
    assert "Binds" not in hc


def test_only_the_workspace_and_the_runner_are_mounted() -> None:
    mounts = host_config()["Mounts"]
    assert mounts == [
        {
            "Target": str(WORKSPACE),
            "Source": str(WORKSPACE),
            "Type": "bind",
            "ReadOnly": False,
        },
        {"Target": RUNNER_DIR, "Source": str(RUNNER), "Type": "bind", "ReadOnly": True},
    ]


def test_limits_become_engine_limits() -> None:
    limits = SandboxLimits(memory_mb=300, cpus=1.5, pids=77, file_size_mb=5, tmpfs_mb=16)
    hc = host_config(limits)
    assert hc["Memory"] == hc["MemorySwap"] == 300 << 20
    assert hc["NanoCpus"] == 1_500_000_000
    assert hc["PidsLimit"] == 77
    assert {"Name": "fsize", "Soft": 5 << 20, "Hard": 5 << 20} in hc["Ulimits"]
    assert {"Name": "core", "Soft": 0, "Hard": 0} in hc["Ulimits"]
    assert hc["Tmpfs"] == {"/tmp": "rw,nosuid,nodev,size=16m,nr_inodes=4096,mode=1777"}


def test_tmp_never_takes_more_than_half_the_memory() -> None:
    # What /tmp holds survives the command's death: the runner must still have room to answer.
    hc = host_config(SandboxLimits(memory_mb=64, tmpfs_mb=256))
    assert hc["Tmpfs"] == {"/tmp": "rw,nosuid,nodev,size=32m,nr_inodes=8192,mode=1777"}


def test_network_only_when_granted() -> None:
    assert host_config(SandboxLimits(network=NetworkMode.BRIDGE))["NetworkMode"] == "bridge"
    assert host_config(SandboxLimits(network=NetworkMode.NONE))["NetworkMode"] == "none"


def test_idle_exit_reaches_the_runner_command_line() -> None:
    command = recipe_for(idle_exit_s=42).create_kwargs["command"]
    at = command.index("--idle-exit-s")
    assert command[at : at + 2] == ["--idle-exit-s", "42"]


@pytest.mark.parametrize("run_as", [None, (0, 5678), (1234, 0)])
def test_no_container_runs_commands_as_root_or_group_zero(
    run_as: tuple[int, int] | None,
) -> None:
    spec = SandboxSpec(workspace=WORKSPACE, run_as=run_as)
    with pytest.raises(ValueError, match="never runs commands as root"):
        container_recipe(spec, image="img", runner_source=RUNNER, instance_id="inst-1")
