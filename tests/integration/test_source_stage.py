"""A root daemon hands the engine no mount source a host account could steer: each is the
object the daemon checked, bound by descriptor onto a folder of root's (attacker round 125: the
owner of a project swapped a pin for a link while a container was made, and the engine mounted
a folder the owner may not enter into the owner's own container)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from sandbox.backend import (
    SET_UP_CHANGED,
    BashRequest,
    PathPin,
    SandboxSpec,
    SandboxStartError,
)
from sandbox.docker_backend import DockerBackend
from sandbox.executor import SandboxExecutor
from sandbox.mount_check import read_mount_points
from sandbox.source_stage import SourceStage, engine_pid
from tests.integration import sandbox_fixtures
from tests.integration.sandbox_fixtures import spec_for

docker_client = sandbox_fixtures.docker_client
sandbox_image = sandbox_fixtures.sandbox_image
owned_root = sandbox_fixtures.owned_root
workspace = sandbox_fixtures.workspace
instance_id = sandbox_fixtures.instance_id
backend = sandbox_fixtures.backend
executor = sandbox_fixtures.executor


def _identity(path: Path) -> tuple[int, int]:
    info = path.stat()
    return info.st_dev, info.st_ino


@pytest.fixture
def stage(tmp_path: Path) -> Any:
    made = SourceStage.open(tmp_path / "stage", engine_pid("/var/run/docker.sock"))
    assert made is not None, "a root daemon sharing the engine's mounts stages its sources"
    yield made
    made.close()
    assert not any(p.startswith(str(tmp_path / "stage")) for p in read_mount_points("self"))


def test_the_source_is_the_object_checked_whatever_its_path_names_afterwards(
    stage: SourceStage, tmp_path: Path
) -> None:
    checked = tmp_path / "project"
    checked.mkdir()
    (checked / "marker").write_text("checked\n")
    elsewhere = tmp_path / "root-only"
    elsewhere.mkdir(mode=0o700)
    (elsewhere / "marker").write_text("secret\n")
    spec = SandboxSpec(workspace=checked, workspace_id=_identity(checked))
    with stage.holding(spec) as sources:
        os.rename(checked, tmp_path / "moved")
        checked.symlink_to(elsewhere)
        assert (Path(sources[str(checked)]) / "marker").read_text() == "checked\n"
    assert (tmp_path / "moved" / "marker").read_text() == "checked\n"  # unbound, not removed
    assert list(stage.root.iterdir()) == []


def test_a_link_on_the_way_or_another_object_is_refused(stage: SourceStage, tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    spec = SandboxSpec(workspace=tmp_path / "linked", workspace_id=_identity(real))
    (tmp_path / "linked").symlink_to(real)
    with pytest.raises(SandboxStartError) as refused, stage.holding(spec):
        pass
    assert str(refused.value) == SET_UP_CHANGED
    other = SandboxSpec(workspace=real, workspace_id=(1, 1))
    with pytest.raises(SandboxStartError), stage.holding(other):
        pass
    (real / ".git").mkdir()
    pin = PathPin(path=str(real / ".git"), identity=_identity(real / ".git"), read_only=True)
    spec = SandboxSpec(workspace=real, workspace_id=_identity(real), git_pins=(pin,))
    (real / ".git").rename(real / ".git-moved")
    (real / ".git").symlink_to(real / ".git-moved")
    with pytest.raises(SandboxStartError), stage.holding(spec):  # the workspace bound first
        pass
    assert list(stage.root.iterdir()) == []
    assert not any(p.startswith(str(stage.root) + "/") for p in read_mount_points("self"))


@pytest.mark.docker
async def test_the_engine_mounts_the_workspace_checked_not_what_its_path_names_then(
    executor: SandboxExecutor,
    backend: DockerBackend,
    workspace: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The workspace swapped for another folder at its path once the daemon bound its sources
    and before the engine resolves them: the container gets the one checked, and runs."""
    (workspace / "marker").write_text("checked\n")
    spec = spec_for(workspace)
    asked = backend._start_from

    def swapped_then_asked(*args: Any) -> Any:
        monkeypatch.undo()  # once
        os.rename(workspace, workspace.with_name("moved"))
        workspace.mkdir()
        (workspace / "marker").write_text("swapped in\n")
        return asked(*args)

    monkeypatch.setattr(backend, "_start_from", swapped_then_asked)
    request = BashRequest(command="cat marker", cwd=str(workspace), timeout_ms=30_000)
    result = await executor.run(spec, request)
    assert result.output == "checked\n", result
