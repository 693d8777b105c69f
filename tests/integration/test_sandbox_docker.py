"""The Docker sandbox against the real engine: hardening, semantics, limits, and no leaks.

Every test's backend has its own instance label; its fixture fails the test if any container with
that label is left afterwards, in any state.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import resource
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import docker
import docker.errors
import pytest

from sandbox.backend import (
    LABEL_INSTANCE,
    LABEL_MANAGED,
    LABEL_SESSION,
    LABEL_TOOL_USE,
    BashRequest,
    SandboxLimits,
    WriteFileRequest,
)
from sandbox.docker_backend import DockerBackend
from sandbox.executor import SandboxExecutor
from sandbox.hardening import RUNNER_DIR, RUNNER_PATH, SAFE_ENV
from tests.integration import sandbox_fixtures
from tests.integration.sandbox_fixtures import (
    WORKSPACE_GID,
    WORKSPACE_UID,
    assert_no_containers,
    instance_containers,
    spec_for,
)

pytestmark = pytest.mark.docker

docker_client = sandbox_fixtures.docker_client
sandbox_image = sandbox_fixtures.sandbox_image
owned_root = sandbox_fixtures.owned_root
workspace = sandbox_fixtures.workspace
instance_id = sandbox_fixtures.instance_id
backend = sandbox_fixtures.backend
executor = sandbox_fixtures.executor


def bash(ws: Path, command: str, timeout_ms: int = 20_000) -> BashRequest:
    return BashRequest(command=command, cwd=str(ws), timeout_ms=timeout_ms)


def exists(client: docker.DockerClient, container_id: str) -> bool:
    try:
        client.api.inspect_container(container_id)
    except docker.errors.NotFound:
        return False
    return True


# --- hardening, as the engine applied it ------------------------------------------------------


async def test_running_container_is_hardened_as_inspected(
    backend: DockerBackend, docker_client: docker.DockerClient, workspace: Path, instance_id: str
) -> None:
    limits = SandboxLimits(memory_mb=96, cpus=0.5, pids=50, file_size_mb=7, tmpfs_mb=8)
    spec = spec_for(workspace, limits=limits, session_id="sess-x")
    sandbox = await backend.start(spec, tool_use_id="toolu_x")
    try:
        info = docker_client.api.inspect_container(sandbox.id)
        config, host = info["Config"], info["HostConfig"]
        assert info["State"]["Running"] is True
        # The runner is the container's root; the command runs as the workspace's identity.
        assert config["User"] == "0:0"
        assert config["WorkingDir"] == str(workspace)
        assert config["Cmd"][:5] == ["python3", "-E", "-s", "-S", RUNNER_PATH]
        assert config["Cmd"][-2:] == ["--run-as", f"{WORKSPACE_UID}:{WORKSPACE_GID}"]
        assert host["CapDrop"] == ["ALL"]
        assert host["CapAdd"] == ["SETUID", "SETGID", "KILL"]
        assert host["Privileged"] is False
        assert host["SecurityOpt"] == ["no-new-privileges"]
        assert host["ReadonlyRootfs"] is True
        assert host["Tmpfs"] == {"/tmp": "rw,nosuid,nodev,size=8m,nr_inodes=2048,mode=1777"}
        assert host["Sysctls"] == {
            "kernel.shm_rmid_forced": "1",
            "kernel.msgmni": "16",
            "net.ipv4.tcp_rmem": "4096 16384 1048576",
            "net.ipv4.tcp_wmem": "4096 16384 1048576",
            "net.core.optmem_max": "20480",
        }
        assert host["NetworkMode"] == "none"
        assert host["PidsLimit"] == 50
        assert host["Memory"] == host["MemorySwap"] == 96 << 20
        assert host["NanoCpus"] == 500_000_000
        assert {"Name": "fsize", "Soft": 7 << 20, "Hard": 7 << 20} in host["Ulimits"]
        assert host["Init"] is True
        assert dict(e.split("=", 1) for e in config["Env"]) == SAFE_ENV
        mounts = {(m["Type"], m["Source"], m["Destination"], m["RW"]) for m in info["Mounts"]}
        # The workspace as the daemon checked it, bound for the engine (sandbox/source_stage.py).
        staged = next(m["Source"] for m in info["Mounts"] if m["Destination"] == str(workspace))
        assert backend._stage is not None
        assert Path(staged).parent.parent == backend._stage.root
        assert mounts == {
            ("bind", staged, str(workspace), True),
            ("bind", mounts_runner_source(info), RUNNER_DIR, False),
        }
        assert not any("docker.sock" in m["Source"] for m in info["Mounts"])
        labels = config["Labels"]
        assert labels[LABEL_MANAGED] == "true"
        assert labels[LABEL_INSTANCE] == instance_id
        assert labels[LABEL_SESSION] == "sess-x"
        assert labels[LABEL_TOOL_USE] == "toolu_x"
    finally:
        await sandbox.destroy()
    assert not exists(docker_client, sandbox.id)


def mounts_runner_source(info: dict[str, object]) -> str:
    mounts = info["Mounts"]
    assert isinstance(mounts, list)
    return next(str(m["Source"]) for m in mounts if m["Destination"] == RUNNER_DIR)


# --- bash semantics ---------------------------------------------------------------------------


async def test_bash_output_exit_code_and_final_directory(
    executor: SandboxExecutor, workspace: Path
) -> None:
    spec = spec_for(workspace)
    (workspace / "sub").mkdir()
    echo = await executor.run(spec, bash(workspace, "echo hi; echo oops >&2; pwd"))
    assert (echo.output, echo.exit_code) == (f"hi\noops\n{workspace}\n", 0)
    failed = await executor.run(spec, bash(workspace, "cd sub && echo bye && exit 7"))
    assert (failed.output, failed.exit_code) == ("bye\n", 7)
    assert failed.final_cwd == str(workspace / "sub")
    await executor.warm(spec)  # refills race the calls; wait for one, then it must be used
    hits = executor.stats().pool_hits
    quiet = await executor.run(spec, bash(workspace, "true"))
    assert (quiet.output, quiet.output_bytes, quiet.exit_code) == ("", 0, 0)
    assert executor.stats().pool_hits == hits + 1


async def test_cold_path_without_a_pool(backend: DockerBackend, workspace: Path) -> None:
    executor = SandboxExecutor(backend, pool_size=0, close_backend=False)
    try:
        result = await executor.run(spec_for(workspace), bash(workspace, "echo cold"))
    finally:
        await executor.close()
    assert result.output == "cold\n"
    assert executor.stats().pool_misses == 1 and executor.stats().pool_hits == 0


async def test_timeout_returns_promptly_and_leaves_no_container(
    executor: SandboxExecutor, workspace: Path, docker_client: docker.DockerClient
) -> None:
    started = time.monotonic()
    result = await executor.run(
        spec_for(workspace), bash(workspace, "echo started; sleep 1000", 1000)
    )
    # Bounded far above the 1 s timeout so a loaded machine cannot fail it, far below 1000 s.
    assert time.monotonic() - started < 60
    assert result.timed_out is True
    assert result.exit_code == 137
    assert result.output == "started\n"
    await wait_gone(docker_client, result.sandbox_id)


async def test_outer_deadline_kills_a_container_whose_runner_hangs(
    executor: SandboxExecutor,
    backend: DockerBackend,
    workspace: Path,
    docker_client: docker.DockerClient,
) -> None:
    # Freeze the whole container from outside (the command cannot stop its runner): only the
    # daemon's deadline is left.
    call = asyncio.create_task(
        executor.run(spec_for(workspace), bash(workspace, "sleep 1000", 500))
    )
    async with asyncio.timeout(30):
        while executor.stats().in_flight == 0:
            await asyncio.sleep(0.01)
    (running,) = backend.live_ids()
    docker_client.api.pause(running)
    result = await call
    assert result.timed_out is True
    assert result.duration_ms < 60_000
    await wait_gone(docker_client, result.sandbox_id)


async def test_the_command_cannot_stop_or_kill_its_runner(
    executor: SandboxExecutor, workspace: Path
) -> None:
    command = "kill -STOP $PPID; kill -KILL $PPID; kill -KILL 1; echo still-here"
    result = await executor.run(spec_for(workspace), bash(workspace, command))
    assert result.output.count("Operation not permitted") == 3, result.output
    assert result.output.endswith("still-here\n") and result.exit_code == 0


async def test_cancelling_the_call_removes_the_container_at_once(
    executor: SandboxExecutor,
    backend: DockerBackend,
    workspace: Path,
    docker_client: docker.DockerClient,
) -> None:
    spec = spec_for(workspace)
    await executor.warm(spec)
    pooled = backend.live_ids()
    task = asyncio.create_task(executor.run(spec, bash(workspace, "sleep 1000", 600_000)))
    async with asyncio.timeout(10):
        while executor.stats().in_flight == 0:
            await asyncio.sleep(0.01)
    await asyncio.sleep(0.3)
    (running,) = pooled  # pool size 1: the warm container is the one running the call
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not exists(docker_client, running)


async def test_a_runner_killed_from_outside_is_a_clear_failure(
    executor: SandboxExecutor, workspace: Path, docker_client: docker.DockerClient
) -> None:
    call = asyncio.create_task(
        executor.run(spec_for(workspace), bash(workspace, "echo go > started; sleep 100"))
    )
    async with asyncio.timeout(30):
        while not (workspace / "started").exists():
            await asyncio.sleep(0.05)
    (container,) = {c["Id"] for c in docker_client.api.containers(filters={"status": "running"})
                    if str(workspace) in str(c["Mounts"])}  # fmt: skip
    processes = docker_client.api.top(container)["Processes"]
    runner = next(int(p[1]) for p in processes if "start.py" in p[-1])
    os.kill(runner, signal.SIGKILL)
    result = await call
    assert result.error.startswith("the sandbox failed: its runner ended without answering")
    assert not result.cancelled and not result.timed_out
    await wait_gone(docker_client, result.sandbox_id)


async def test_shutdown_stops_running_calls_with_a_cancelled_result(
    backend: DockerBackend, workspace: Path
) -> None:
    executor = SandboxExecutor(backend, pool_size=0, close_backend=False)
    call = asyncio.create_task(
        executor.run(spec_for(workspace), bash(workspace, "sleep 1000", 600_000))
    )
    async with asyncio.timeout(10):
        while executor.stats().in_flight == 0:
            await asyncio.sleep(0.01)
    await asyncio.sleep(0.3)
    await executor.close()
    result = await asyncio.wait_for(call, 10)
    assert result.cancelled is True
    assert result.error == ""


async def test_oom_is_reported_as_such(executor: SandboxExecutor, workspace: Path) -> None:
    spec = spec_for(workspace, limits=SandboxLimits(memory_mb=64))
    hog = "python3 -c 'x = bytearray(1 << 20) * 512; print(len(x))'"
    result = await executor.run(spec, bash(workspace, f"echo before; {hog}"))
    assert result.oom_killed is True
    assert result.exit_code == 137
    assert result.output.startswith("before\n")
    assert not result.timed_out


async def test_fork_bomb_is_contained_by_the_pids_limit(
    executor: SandboxExecutor, workspace: Path
) -> None:
    spec = spec_for(workspace, limits=SandboxLimits(pids=64))
    started = time.monotonic()
    bomb = await executor.run(
        spec, bash(workspace, "bomb() { bomb | bomb & }; bomb; sleep 3", 5000)
    )
    assert time.monotonic() - started < 30
    assert bomb.error == ""
    after = await executor.run(spec, bash(workspace, "echo still fine"))
    assert after.output == "still fine\n"


async def test_network_is_absent_by_default(executor: SandboxExecutor, workspace: Path) -> None:
    result = await executor.run(
        spec_for(workspace),
        bash(workspace, "ls /sys/class/net; echo ---; tail -n +2 /proc/net/route"),
    )
    interfaces, routes = result.output.split("---\n")
    assert interfaces.split() == ["lo"]
    assert routes.strip() == ""


async def test_only_the_workspace_and_tmp_are_writable(
    executor: SandboxExecutor, workspace: Path
) -> None:
    command = textwrap.dedent(
        """
        for path in /etc/x /usr/x /opt/tooljail/runner.py /x; do
            if touch "$path" 2>/dev/null; then echo "WROTE $path"; fi
        done
        touch /tmp/ok && echo tmp-ok
        test -e /var/run/docker.sock || echo no-docker-socket
        """
    )
    result = await executor.run(spec_for(workspace), bash(workspace, command))
    assert "WROTE" not in result.output
    assert result.output.split() == ["tmp-ok", "no-docker-socket"]


async def test_files_created_in_the_workspace_belong_to_its_owner(
    executor: SandboxExecutor, workspace: Path
) -> None:
    await executor.run(spec_for(workspace), bash(workspace, "mkdir d && echo x > d/f && id -u"))
    for path in (workspace / "d", workspace / "d" / "f"):
        info = path.stat()
        assert (info.st_uid, info.st_gid) == (WORKSPACE_UID, WORKSPACE_GID)


async def test_output_flood_is_counted_not_stored(
    executor: SandboxExecutor, workspace: Path
) -> None:
    total = 200 << 20
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = await executor.run(
        spec_for(workspace), bash(workspace, f"yes | head -c {total}", 60_000)
    )
    rss_growth_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before
    assert result.output_bytes == total
    assert result.output_truncated is True
    assert len(result.output.encode()) <= (1 << 20) + 200
    assert result.output.startswith("y\ny\n") and result.output.endswith("y\n")
    assert rss_growth_kib < 64 * 1024


# --- write_file -------------------------------------------------------------------------------


async def test_write_creates_replaces_and_refuses_stale_writes(
    executor: SandboxExecutor, workspace: Path
) -> None:
    spec = spec_for(workspace)
    target = workspace / "pkg" / "mod.py"
    created = await executor.run(spec, WriteFileRequest(path=str(target), content="v1\n"))
    assert (created.error, created.exit_code) == ("", 0)
    assert target.read_text() == "v1\n"
    assert target.stat().st_uid == WORKSPACE_UID
    target.chmod(0o750)

    v1 = hashlib.sha256(b"v1\n").hexdigest()
    replaced = await executor.run(
        spec, WriteFileRequest(path=str(target), content="v2\n", expected_sha256=v1)
    )
    assert replaced.error == ""
    assert target.read_text() == "v2\n"
    assert target.stat().st_mode & 0o777 == 0o750

    stale = await executor.run(
        spec, WriteFileRequest(path=str(target), content="v3\n", expected_sha256=v1)
    )
    assert "changed since it was read" in stale.error
    assert target.read_text() == "v2\n"
    recreate = await executor.run(spec, WriteFileRequest(path=str(target), content="v4\n"))
    assert "changed since it was read" in recreate.error
    assert target.read_text() == "v2\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["mod.py"]


async def test_the_sandbox_swaps_and_creates_names_atomically_as_writes_need(
    executor: SandboxExecutor, workspace: Path
) -> None:
    """A Write replaces the file it checked by exchanging two names (renameat2 EXCHANGE) and
    creates one only where nothing is (NOREPLACE); where either is missing it falls back to
    plain renames with a wider window. Both work in the sandbox, confinement filter included."""
    swap = (
        'echo a > a && echo b > b && python3 -c "import ctypes; l = ctypes.CDLL(None); '
        "print(l.renameat2(-100, b'a', -100, b'b', 2), l.renameat2(-100, b'a', -100, b'b', 1))\""
        " && cat a b"
    )
    answer = await executor.run(spec_for(workspace), bash(workspace, swap))
    assert (answer.output, answer.exit_code) == ("0 -1\nb\na\n", 0)


async def test_write_errors_are_clear_and_harmless(
    executor: SandboxExecutor, workspace: Path
) -> None:
    spec = spec_for(workspace)
    locked = workspace / "locked"
    locked.mkdir()
    (locked / "keep.txt").write_text("original")
    os.chown(locked, 0, 0)  # root-owned, 0755: the sandbox user cannot write in it
    denied = await executor.run(
        spec,
        WriteFileRequest(
            path=str(locked / "keep.txt"),
            content="new",
            expected_sha256=hashlib.sha256(b"original").hexdigest(),
        ),
    )
    assert denied.error.startswith("permission denied")
    assert (locked / "keep.txt").read_text() == "original"
    refused = await executor.run(spec, WriteFileRequest(path="/usr/evil", content="x"))
    assert "not inside the workspace" in refused.error


async def test_the_container_itself_refuses_writes_outside_the_workspace(
    backend: DockerBackend, workspace: Path
) -> None:
    # Straight to a container, past the executor's check: the runner refuses on its own, and
    # never follows a link (the daemon sends the path its links resolved to when judged).
    (workspace / "escape").symlink_to("/tmp/x")
    for path, why in (("/usr/evil", "outside the workspace"), (workspace / "escape", "link now")):
        sandbox = await backend.start(spec_for(workspace))
        try:
            result = await sandbox.run(WriteFileRequest(path=str(path), content="x"))
        finally:
            await sandbox.destroy()
        assert why in result.error


async def test_file_size_limit_stops_writes(executor: SandboxExecutor, workspace: Path) -> None:
    spec = spec_for(workspace, limits=SandboxLimits(file_size_mb=1))
    big = await executor.run(
        spec, WriteFileRequest(path=str(workspace / "big"), content="x" * (2 << 20))
    )
    assert big.error.startswith("file too large")
    assert not (workspace / "big").exists()


# --- leaks ------------------------------------------------------------------------------------


async def test_reap_removes_the_instance_containers_in_every_state(
    backend: DockerBackend,
    docker_client: docker.DockerClient,
    sandbox_image: str,
    instance_id: str,
    workspace: Path,
) -> None:
    labels = {LABEL_MANAGED: "true", LABEL_INSTANCE: instance_id}
    created = docker_client.api.create_container(sandbox_image, ["true"], labels=labels)["Id"]
    exited = docker_client.api.create_container(sandbox_image, ["true"], labels=labels)["Id"]
    docker_client.api.start(exited)
    docker_client.api.wait(exited, timeout=30)
    other = docker_client.api.create_container(
        sandbox_image, ["true"], labels={LABEL_MANAGED: "true", LABEL_INSTANCE: "someone-else"}
    )["Id"]
    try:
        running = await backend.start(spec_for(workspace))
        assert len(instance_containers(docker_client, instance_id)) == 3
        assert await backend.reap_untracked() == 0  # all too young to be leftovers
        assert await DockerBackend.reap_instance(instance_id, docker_client) == 3
        assert instance_containers(docker_client, instance_id) == []
        assert exists(docker_client, other)
        await running.destroy()
        assert not {created, exited, running.id} & set(
            instance_containers(docker_client, instance_id)
        )
    finally:
        docker_client.api.remove_container(other, force=True)


async def test_containers_of_a_killed_daemon_remove_themselves(
    docker_client: docker.DockerClient, sandbox_image: str, instance_id: str, workspace: Path
) -> None:
    # A separate process plays the daemon: it starts a warm container, then dies by SIGKILL.
    ids = tuple(spec_for(workspace).workspace_id)
    script = textwrap.dedent(
        f"""
        import asyncio, sys
        from pathlib import Path
        from sandbox.backend import SandboxSpec
        from sandbox.docker_backend import DockerBackend

        async def main():
            backend = DockerBackend(image={sandbox_image!r}, instance_id={instance_id!r})
            spec = SandboxSpec(
                workspace=Path({str(workspace)!r}), workspace_id={ids!r}, run_as=(1000, 1000)
            )
            sandbox = await backend.start(spec)
            print(sandbox.id, flush=True)
            await asyncio.sleep(3600)

        asyncio.run(main())
        """
    )
    daemon = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert daemon.stdout is not None
        container_id = daemon.stdout.readline().decode().strip()
        assert exists(docker_client, container_id)
    finally:
        daemon.send_signal(signal.SIGKILL)
        daemon.wait(timeout=30)
        if daemon.stdout is not None:
            daemon.stdout.close()
    assert_no_containers(docker_client, instance_id, within_s=20)


async def wait_gone(client: docker.DockerClient, container_id: str, within_s: float = 5) -> None:
    deadline = time.monotonic() + within_s
    while exists(client, container_id):
        assert time.monotonic() < deadline, f"container {container_id[:12]} is still there"
        await asyncio.sleep(0.05)


async def test_close_removes_the_instances_untracked_containers_too(
    docker_client: docker.DockerClient, sandbox_image: str, instance_id: str
) -> None:
    """A container the engine made although its create answer was lost (the engine stopping)
    is never tracked: closing the backend removes it anyway, by its instance label."""
    backend = DockerBackend(image=sandbox_image, instance_id=instance_id, client=docker_client)
    labels = {LABEL_MANAGED: "true", LABEL_INSTANCE: instance_id}
    lost = docker_client.api.create_container(sandbox_image, ["sleep", "60"], labels=labels)["Id"]
    docker_client.api.start(lost)
    await backend.close()
    assert instance_containers(docker_client, instance_id) == []
