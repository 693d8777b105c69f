"""Containers over a workspace whose owner can change it from the host run as that owner
throughout: no root and no capability in them, the runner their first process. The owner can
still swap a pinned path for a link between the daemon's look and the engine's mount (no
freezing of sandboxes stops a process on the host); what the engine then runs of theirs runs as
themselves."""

from __future__ import annotations

import asyncio
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest

from sandbox.backend import BashRequest, SandboxStartError, WriteFileRequest
from sandbox.docker_backend import DockerBackend
from sandbox.executor import SandboxExecutor
from tests.integration import sandbox_fixtures
from tests.integration.sandbox_fixtures import WORKSPACE_UID, spec_for
from tests.integration.test_sandbox_git_dir import pinned_spec, repository

pytestmark = pytest.mark.docker

docker_client = sandbox_fixtures.docker_client
sandbox_image = sandbox_fixtures.sandbox_image
owned_root = sandbox_fixtures.owned_root
workspace = sandbox_fixtures.workspace
instance_id = sandbox_fixtures.instance_id
backend = sandbox_fixtures.backend
executor = sandbox_fixtures.executor

LOOK = "id -u; grep CapEff /proc/1/status; tr '\\0' ' ' < /proc/1/cmdline; echo; ls /proc/1/fd"


def bash(workspace: Path, command: str) -> BashRequest:
    return BashRequest(command=command, cwd=str(workspace), timeout_ms=30_000)


async def test_a_container_over_an_owners_workspace_has_no_root_in_it(
    executor: SandboxExecutor, workspace: Path
) -> None:
    spec = spec_for(workspace, no_root=True)
    assert spec.run_as == (WORKSPACE_UID, WORKSPACE_UID)
    result = await executor.run(spec, bash(workspace, f"{LOOK} 2>&1; touch made"))
    lines = result.output.splitlines()
    assert lines[0] == str(WORKSPACE_UID)
    assert lines[1].split() == ["CapEff:", "0000000000000000"]
    assert lines[2].startswith("python3 ") and "--end-leftovers" in lines[2]  # the runner: PID 1
    assert "Permission denied" in lines[3]  # not dumpable: its answer stream is out of reach
    assert (workspace / "made").stat().st_uid == WORKSPACE_UID
    written = await executor.run(
        spec, WriteFileRequest(path=str(workspace / "w.txt"), content="hello\n")
    )
    assert written.error == "", written
    assert (workspace / "w.txt").read_text() == "hello\n"
    left = await executor.run(spec, bash(workspace, "setsid sleep 300 & echo started"))
    assert left.output.strip() == "started"


async def test_without_it_the_runner_is_root(executor: SandboxExecutor, workspace: Path) -> None:
    result = await executor.run(spec_for(workspace), bash(workspace, f"{LOOK} 2>&1"))
    lines = result.output.splitlines()
    assert lines[1].split()[1] != "0000000000000000"
    assert "docker-init" in lines[2]


@pytest.mark.parametrize("throughout", [True, False])
async def test_what_the_owner_steers_from_the_host_runs_as_the_owner(
    backend: DockerBackend, workspace: Path, monkeypatch: pytest.MonkeyPatch, throughout: bool
) -> None:
    """The owner wins the race against the daemon's last look (stood in for: the swap comes
    once the sources are bound, just before the engine is asked) and steers `.git`'s mount
    (its target: the source is the repository the daemon checked, which is the owner's) over
    the image's Python library, with an `encodings` module in the repository that the
    container's first process imports. In a container with root in it, that code runs as root
    (the control); as the owner throughout, as the owner."""
    repository(workspace)
    spec = pinned_spec(workspace).model_copy(update={"no_root": throughout})
    public = workspace / "pub"
    public.mkdir()
    public.chmod(0o777)  # a folder anyone may write in, as an owner may have
    (workspace / ".git" / "encodings").mkdir()
    (workspace / ".git" / "encodings" / "__init__.py").write_text(
        "import posix\n"
        f"fd = posix.open({str(public / 'who')!r}, posix.O_WRONLY | posix.O_CREAT, 0o644)\n"
        "posix.write(fd, str(posix.getuid()).encode())\n"
    )
    asked = backend._start_from

    def swapped_then_asked(*args: Any) -> Any:
        os.rename(workspace / ".git", workspace / ".git-real")
        (workspace / ".git").symlink_to("/usr/lib/python3.11")
        return asked(*args)

    monkeypatch.setattr(backend, "_start_from", swapped_then_asked)
    # As under the shipped unit, which cannot read containers' mount tables: a root daemon's
    # check comes after the first process started anyway, and may remove it before or after
    # the steered code ran.
    monkeypatch.setattr(backend, "_check_mounts", lambda *args: None)
    try:
        made = await backend.start(spec)
    except SandboxStartError:
        made = None
    deadline = time.monotonic() + 30
    while not (public / "who").exists() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    if made is not None:
        await made.destroy()
    who = (public / "who").read_text()
    assert who == (str(WORKSPACE_UID) if throughout else "0")
    assert re.fullmatch(r"\d+", who)


async def test_an_interrupt_sent_to_the_runner_by_its_commands_ends_nothing(
    executor: SandboxExecutor, workspace: Path
) -> None:
    """In a container with no root, the commands share the runner's uid and may signal it; as
    the container's first process it gets only the signals it handles, and Python handles
    SIGINT: the command ended its own call (attacker round 125's partial finding)."""
    spec = spec_for(workspace, no_root=True)
    result = await executor.run(spec, bash(workspace, "kill -INT 1; sleep 0.5; echo still here"))
    assert result.error == "" and result.output == "still here\n", result
    # The commands' own processes still start with SIGINT's default (not ignored).
    probe = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    inherited = await executor.run(spec, bash(workspace, f'python3 -c "{probe}"'))
    assert inherited.output == "True\n", inherited
