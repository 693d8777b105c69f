"""The workspace's .git read-only in a real container: git reads work, nothing in .git can be
written, renamed or replaced, and a container whose mounted .git is not the recorded one (a link
swapped in before the engine mounted it) refuses to run anything."""

from __future__ import annotations

import asyncio
import os
import re
import textwrap
import time
from pathlib import Path
from typing import Any

import docker.errors
import pytest

from daemon.host.git_pins import git_pins
from daemon.host.pinned import PinnedDirectory
from sandbox.backend import (
    SET_UP_CHANGED,
    BashRequest,
    SandboxSpec,
    SandboxStartError,
    WayFolder,
)
from sandbox.docker_backend import STOPPED_FOR_SET_UP, DockerBackend
from sandbox.executor import SandboxExecutor
from sandbox.set_up_gate import FreezeOutcome, Unfreezable
from tests.integration import sandbox_fixtures
from tests.integration.harness import committed_repository, git
from tests.integration.sandbox_fixtures import (
    WORKSPACE_GID,
    WORKSPACE_UID,
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

#: Every way a command could leave something the host's git runs (or stop the repository being
#: the one at .git); each prints what it managed to do.
PLANTING = textwrap.dedent(
    """
    printf '#!/bin/sh\\ntouch /tmp/pwned\\n' > .git/hooks/post-checkout && echo WROTE-hook
    printf '[core]\\n\\tfsmonitor = touch /tmp/pwned\\n' >> .git/config && echo WROTE-config
    git config core.hooksPath /tmp 2>/dev/null && echo WROTE-hooksPath
    echo ../elsewhere > .git/commondir && echo WROTE-commondir
    touch .git/config.worktree && echo WROTE-config.worktree
    mkdir .git/info/x 2>/dev/null && echo WROTE-info
    mv .git .git-old 2>/dev/null && echo MOVED-git
    rm -rf .git 2>/dev/null; test -e .git/HEAD || echo REMOVED-git
    git status --short && echo STATUS-ok
    git log --oneline | wc -l
    """
)


def repository(workspace: Path) -> dict[str, bytes]:
    """A committed repository at the workspace's root; every file of its .git and its content."""
    committed_repository(workspace, (WORKSPACE_UID, WORKSPACE_GID))
    return snapshot(workspace / ".git")


def snapshot(git_dir: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(git_dir)): path.read_bytes() if path.is_file() else b"<dir>"
        for path in git_dir.rglob("*")
    }


def pinned_spec(workspace: Path) -> SandboxSpec:
    """A container spec holding the workspace's repository read-only, as the daemon makes it."""
    root = PinnedDirectory.pin(workspace)
    try:
        return spec_for(workspace, git_pins=git_pins(root))
    finally:
        root.close()


def steering_link(workspace: Path, in_container: str) -> str:
    """A link's text that the host resolves to `in_container` below the workspace's parent,
    and the container, where the link on its way does not exist, as text to `in_container`
    (attacker round 118's steering)."""
    host_only = workspace.parent / f"host-only-{workspace.name}"
    if not host_only.exists():
        (host_only / "a" / "b" / "c").mkdir(parents=True)
        (host_only / "L").symlink_to(host_only / "a" / "b" / "c")
    climbs = "/".join([".."] * (len(host_only.parts)))  # to the container's / as text
    return f"{host_only}/L/{climbs}{in_container}"


def bash(workspace: Path, command: str) -> BashRequest:
    return BashRequest(command=command, cwd=str(workspace), timeout_ms=30_000)


async def test_nothing_in_a_read_only_git_can_be_written_moved_or_removed(
    executor: SandboxExecutor, workspace: Path
) -> None:
    before = repository(workspace)
    result = await executor.run(pinned_spec(workspace), bash(workspace, PLANTING))
    assert result.error == ""
    outcomes = re.findall(r"^(?:WROTE|MOVED|REMOVED|STATUS)-\S+", result.output, re.MULTILINE)
    assert outcomes == ["STATUS-ok"], result.output
    assert result.output.split()[-1] == "1"  # the history is there to read
    assert snapshot(workspace / ".git") == before
    assert not (workspace / ".git-old").exists()


async def test_without_the_guard_the_same_commands_do_plant(
    executor: SandboxExecutor, workspace: Path
) -> None:
    # The control: what the read-only mount stops is really possible otherwise.
    repository(workspace)
    result = await executor.run(spec_for(workspace), bash(workspace, PLANTING))
    assert "WROTE-hook" in result.output and "WROTE-commondir" in result.output
    assert (workspace / ".git-old" / "hooks" / "post-checkout").exists()


async def test_a_container_whose_git_is_not_the_recorded_one_runs_nothing(
    executor: SandboxExecutor, workspace: Path, tmp_path: Path
) -> None:
    repository(workspace)
    spec = pinned_spec(workspace)
    # Recorded, then replaced by a link before any container was made: the engine follows it.
    os.rename(workspace / ".git", workspace / ".git-real")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (workspace / ".git").symlink_to(elsewhere)
    try:
        answer = (await executor.run(spec, bash(workspace, "touch ran"))).error
    except SandboxStartError as exc:  # refused from the host, before the runner was asked
        answer = str(exc)
    assert answer == SET_UP_CHANGED
    assert not (workspace / "ran").exists()
    assert list(elsewhere.iterdir()) == []


async def test_where_a_link_swapped_in_for_a_mount_leads_is_never_told(
    executor: SandboxExecutor, workspace: Path, tmp_path: Path
) -> None:
    """Attacker round 117: the engine (root) follows a link swapped in for a mount's source;
    it refused one leading nowhere ("bind source path does not exist") and started one leading
    to an existing folder, whose runner then refused it: the answers told which host paths
    exist. Both are the same answer now."""
    repository(workspace)
    spec = pinned_spec(workspace)
    os.rename(workspace / ".git", workspace / ".git-real")
    (tmp_path / "there").mkdir()
    answers = []
    for target in (tmp_path / "there", tmp_path / "nowhere"):
        (workspace / ".git").unlink(missing_ok=True)
        (workspace / ".git").symlink_to(target)
        try:
            answers.append((await executor.run(spec, bash(workspace, "touch ran"))).error)
        except SandboxStartError as exc:
            answers.append(str(exc))
    assert answers == [SET_UP_CHANGED, SET_UP_CHANGED]
    assert not (workspace / "ran").exists()


async def test_a_repository_kept_elsewhere_in_the_workspace_is_read_only_too(
    executor: SandboxExecutor, workspace: Path
) -> None:
    """Attacker round 64: with `.git` a file naming `a/repo` (git init --separate-git-dir),
    only the file was read-only; a line appending core.fsmonitor to a/repo/config ran on the
    host. Moving `a` aside to put another repository there is refused too."""
    (workspace / "a.txt").write_text("a\n")
    (workspace / "a").mkdir()
    git(workspace, "-c", "safe.directory=*", "init", "-q", "--separate-git-dir=a/repo", ".")
    git(workspace, "-c", "safe.directory=*", "add", "a.txt")
    git(workspace, "-c", "safe.directory=*", "commit", "-qm", "a")
    for path in [workspace, *workspace.rglob("*")]:
        os.lchown(path, WORKSPACE_UID, WORKSPACE_GID)
    before = snapshot(workspace / "a" / "repo")
    command = textwrap.dedent(
        """
        printf '[core]\\n\\tfsmonitor = touch /tmp/pwned\\n' >> a/repo/config && echo WROTE-config
        printf 'x' > a/repo/hooks/pre-commit && echo WROTE-hook
        mv a a-old 2>/dev/null && echo MOVED-a
        mv a/repo a/repo-old 2>/dev/null && echo MOVED-repo
        git status --short && echo STATUS-ok
        """
    )
    result = await executor.run(pinned_spec(workspace), bash(workspace, command))
    outcomes = re.findall(r"^(?:WROTE|MOVED|STATUS)-\S+", result.output, re.MULTILINE)
    assert outcomes == ["STATUS-ok"], result.output
    assert snapshot(workspace / "a" / "repo") == before


async def test_no_submodule_can_be_pointed_at_a_repository_of_the_models(
    executor: SandboxExecutor, workspace: Path, tmp_path: Path
) -> None:
    """Attacker round 64: `git status` at the root runs git in every submodule that has a .git;
    a script repointed a submodule's .git (or gave an empty one a .git) at a repository of its
    own whose core.fsmonitor then ran on the host."""
    lib = tmp_path / "lib"
    lib.mkdir()
    git(lib, "init", "-q")
    git(lib, "commit", "-q", "--allow-empty", "-m", "lib")
    git(workspace, "-c", "safe.directory=*", "init", "-q")
    for name in ("vendor/lib", "empty"):
        git(workspace, "-c", "safe.directory=*", "-c", "protocol.file.allow=always",
            "submodule", "add", "-q", str(lib), name)  # fmt: skip
    git(workspace, "-c", "safe.directory=*", "commit", "-qm", "main")
    git(workspace, "-c", "safe.directory=*", "submodule", "deinit", "-q", "empty")
    for path in [workspace, *workspace.rglob("*")]:
        os.lchown(path, WORKSPACE_UID, WORKSPACE_GID)
    marker = tmp_path / "ran"
    command = textwrap.dedent(
        f"""
        git init -q /tmp/evil && git -C /tmp/evil config core.fsmonitor 'touch {marker}'
        cp -r /tmp/evil/.git mine && git config -f mine/config core.fsmonitor 'touch {marker}'
        echo "gitdir: ../../mine" > vendor/lib/.git && echo WROTE-lib
        echo "gitdir: ../mine" > empty/.git && echo WROTE-empty
        mv vendor vendor-old 2>/dev/null && echo MOVED-vendor
        mv vendor/lib vendor/lib-old 2>/dev/null && echo MOVED-lib
        rm -f vendor/lib/.git 2>/dev/null; test -e vendor/lib/.git || echo REMOVED-lib
        git status --short >/dev/null && echo STATUS-ok
        """
    )
    result = await executor.run(pinned_spec(workspace), bash(workspace, command))
    outcomes = re.findall(r"^(?:WROTE|MOVED|REMOVED|STATUS)-\S+", result.output, re.MULTILINE)
    assert outcomes == ["STATUS-ok"], result.output
    git(workspace, "-c", "safe.directory=*", "status", "--short")  # the owner's git, afterwards
    assert not marker.exists()


async def test_a_mount_steered_out_of_the_workspace_never_gets_a_request(
    executor: SandboxExecutor, workspace: Path
) -> None:
    """Attacker round 118: `.git` swapped for a link whose `..` steps resolve differently on
    the host (through a link only the host has) and in the container (as text): the engine
    mounted the tenant's own folder over the container's `/usr/lib/python3.11`, the runner's
    interpreter died before its own check, and the answer said so. The daemon now reads the
    container's mount table before any request goes in."""
    repository(workspace)
    spec = pinned_spec(workspace)
    decoy = workspace.parent / "usr" / "lib" / "python3.11"  # where the host resolves the link
    decoy.mkdir(parents=True, exist_ok=True)
    os.rename(workspace / ".git", workspace / ".git-real")
    (workspace / ".git").symlink_to(steering_link(workspace, "/usr/lib/python3.11"))
    assert os.path.realpath(workspace / ".git") == str(decoy)
    try:
        answer = (await executor.run(spec, bash(workspace, "touch ran"))).error
    except SandboxStartError as exc:
        answer = str(exc)
    assert answer == SET_UP_CHANGED
    assert not (workspace / "ran").exists()


async def test_a_swapped_pin_makes_nothing_on_the_host(
    executor: SandboxExecutor, workspace: Path
) -> None:
    """Attacker round 119: `.git` swapped for a link that the host resolves to an existing
    folder and the container (as text) to a missing name in the workspace: the engine accepted
    the source and the runtime made the missing target, a root-owned folder in the workspace,
    before any check could refuse; a link to a missing host folder was refused at create and
    made nothing, so the folder left behind told which host folders exist. The pins are looked
    at again, with no link followed, before the engine is asked, so neither makes anything."""
    repository(workspace)
    spec = pinned_spec(workspace)
    os.rename(workspace / ".git", workspace / ".git-real")
    before = sorted(p.name for p in workspace.iterdir())
    answers = []
    for made, name in ((True, "MK_there"), (False, "MK_nowhere")):
        decoy = workspace.parent / workspace.relative_to("/") / name  # the host's end
        if made:
            decoy.mkdir(parents=True)
        (workspace / ".git").unlink(missing_ok=True)
        (workspace / ".git").symlink_to(steering_link(workspace, f"{workspace}/{name}"))
        assert os.path.realpath(workspace / ".git") == str(decoy)
        try:
            answers.append((await executor.run(spec, bash(workspace, "touch ran"))).error)
        except SandboxStartError as exc:
            answers.append(str(exc))
    assert answers == [SET_UP_CHANGED, SET_UP_CHANGED]
    assert sorted(p.name for p in workspace.iterdir()) == sorted([*before, ".git"])


async def test_a_workspace_opened_to_everyone_after_its_judgement_gets_no_container(
    executor: SandboxExecutor, docker_client: Any, instance_id: str, workspace: Path
) -> None:
    """Who on the host could race a container's mounts is judged when the call's container is
    asked for; the workspace opened to everyone (chmod 0777: by a host process, a sandbox can
    no longer) before that container's turn would let any local user race it, judged safe.
    Looked at again in the turn, it makes nothing until the workspace is closed again."""
    repository(workspace)
    way = tuple(
        WayFolder(path=str(f), uid=i.st_uid, gid=i.st_gid, mode=i.st_mode)
        for f in (*reversed(workspace.parents), workspace)
        for i in [f.lstat()]
    )
    spec = pinned_spec(workspace).model_copy(update={"host_way": way})
    refused = await executor.run(spec_for(workspace), bash(workspace, "chmod 0777 ."))
    assert refused.exit_code != 0 and "Operation not permitted" in refused.output, refused
    workspace.chmod(0o777)
    with pytest.raises(SandboxStartError) as not_made:
        await executor.run(spec, bash(workspace, "touch ran"))
    assert str(not_made.value) == SET_UP_CHANGED
    assert not (workspace / "ran").exists()
    pinned_mounts = [  # the warm pool refills for the unpinned spec meanwhile; none is pinned
        m
        for c in instance_containers(docker_client, instance_id)
        for m in _mounts_of(docker_client, c)
        if m["Destination"] == str(workspace / ".git")
    ]
    assert pinned_mounts == []
    workspace.chmod(way[-1].mode & 0o7777)
    assert (await executor.run(spec, bash(workspace, "touch ran"))).exit_code == 0
    assert (workspace / "ran").exists()


def _mounts_of(docker_client: Any, container: Any) -> list[dict[str, Any]]:
    """The mounts of `container`; none when it was removed since it was listed (the refused
    call's container and the pool's go on their own: CI at 8f390dd met one gone)."""
    try:
        mounts: list[dict[str, Any]] = docker_client.api.inspect_container(container)["Mounts"]
    except docker.errors.NotFound:
        return []
    return mounts


async def test_no_other_sandbox_of_the_workspace_runs_while_a_pinned_one_is_made(
    backend: DockerBackend, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rounds 117-119 swapped a pinned folder from a background command while the engine made
    the next container. A command of the workspace writing the time every few milliseconds
    writes nothing from the look at the pins until the new container runs, and goes on after."""
    repository(workspace)
    spec = pinned_spec(workspace)
    ticks = workspace / "ticks"
    busy = await backend.start(spec_for(workspace))
    loop = "until [ -e stop ]; do date +%s.%N >> ticks; sleep 0.003; done"
    running = asyncio.create_task(busy.run(bash(workspace, loop)))
    while not (ticks.exists() and ticks.read_text().count("\n") > 5):
        await asyncio.sleep(0.01)
    windows: list[tuple[float, float]] = []
    start_sync = backend._start_sync

    def timed(*args: Any) -> Any:
        begun = time.time()
        try:
            return start_sync(*args)
        finally:
            windows.append((begun, time.time()))

    monkeypatch.setattr(backend, "_start_sync", timed)
    made = await backend.start(spec)
    await made.destroy()
    await asyncio.sleep(0.2)
    (workspace / "stop").touch()
    result = await running
    assert result.exit_code == 0, result
    await busy.destroy()
    ((begun, ended),) = windows
    times = [float(line) for line in ticks.read_text().split()]
    assert [t for t in times if begun <= t <= ended] == []
    assert any(t < begun for t in times) and any(t > ended for t in times)


async def test_a_command_that_cannot_be_frozen_is_stopped_and_told_why(
    backend: DockerBackend, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attacker rounds 122-123: processes held in long system calls kept the engine from
    freezing their container, and every set-up of the workspace was refused while they ran.
    Such a container is stopped instead, the pinned one is made, and the stopped call says why.
    (The engine's refusal is stood in for: making a real one takes gigabytes of writes.)"""
    repository(workspace)
    spec = pinned_spec(workspace)
    busy = await backend.start(spec_for(workspace))
    running = asyncio.create_task(busy.run(bash(workspace, "touch started; sleep 60")))
    while not (workspace / "started").exists():
        await asyncio.sleep(0.01)
    freeze = backend.freeze

    async def refused(container_id: str) -> FreezeOutcome:
        if container_id == busy.id:
            raise Unfreezable(SET_UP_CHANGED)
        return await freeze(container_id)

    monkeypatch.setattr(backend, "freeze", refused)
    made = await backend.start(spec)
    result = await asyncio.wait_for(running, 30)
    assert result.error == STOPPED_FOR_SET_UP
    assert not await backend.exists(busy.id)
    assert (await made.run(bash(workspace, "echo made"))).output.strip() == "made"
    await made.destroy()
    await busy.destroy()
