"""The workspace's .git kept read-only in the sandbox: which object the daemon records, the mount
the container gets, and the runner refusing a request unless that object is there, read-only
(the mount itself is tested against the real engine in tests/integration)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from daemon.app.sandbox import git_dir_id
from daemon.errors import ToolError
from daemon.host.pinned import PinnedDirectory
from sandbox.backend import SandboxSpec
from sandbox.executor import pool_key
from sandbox.hardening import container_recipe
from sandbox.runner import runner as runner_module


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = (tmp_path / "ws").resolve()
    root.mkdir()
    return root


def identity(path: Path) -> tuple[int, int]:
    info = path.lstat()
    return info.st_dev, info.st_ino


def pinned(workspace: Path) -> PinnedDirectory:
    return PinnedDirectory.pin(workspace)


def test_the_daemon_records_a_git_directory_or_file_and_nothing_without_one(
    workspace: Path,
) -> None:
    assert git_dir_id(pinned(workspace)) is None
    (workspace / ".git").mkdir()
    assert git_dir_id(pinned(workspace)) == identity(workspace / ".git")
    (workspace / ".git").rmdir()
    (workspace / ".git").write_text("gitdir: /elsewhere/.git/worktrees/ws\n")
    assert git_dir_id(pinned(workspace)) == identity(workspace / ".git")


def test_a_git_that_is_a_link_is_refused_not_followed(workspace: Path, tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (workspace / ".git").symlink_to(tmp_path / "real")
    with pytest.raises(ToolError, match=r"symbolic link .* Nothing ran"):
        git_dir_id(pinned(workspace))
    (workspace / ".git").unlink()
    os.mkfifo(workspace / ".git")
    with pytest.raises(ToolError, match="neither a directory nor a file"):
        git_dir_id(pinned(workspace))


def test_the_container_gets_git_over_itself_read_only_only_when_recorded(workspace: Path) -> None:
    def mounts(spec: SandboxSpec) -> list[tuple[str, str, bool]]:
        recipe = container_recipe(spec, image="img", runner_source=Path("/opt/r"), instance_id="i")
        return [
            (m["Target"], m["Source"], m["ReadOnly"]) for m in recipe.host_config_kwargs["mounts"]
        ]

    plain = SandboxSpec(workspace=workspace, run_as=(1001, 1001))
    guarded = plain.model_copy(update={"git_dir_id": (1, 2)})
    git = str(workspace / ".git")
    assert (git, git, True) in mounts(guarded)
    assert not any(target == git for target, _, _ in mounts(plain))
    # A container made for another .git (or none) is never taken from the pool for this one.
    assert pool_key(plain) != pool_key(guarded)
    assert pool_key(guarded) != pool_key(plain.model_copy(update={"git_dir_id": (1, 3)}))


def test_the_runner_refuses_unless_the_recorded_git_is_there_and_read_only(
    workspace: Path,
) -> None:
    check = runner_module.git_dir_mismatch
    assert check(str(workspace), None) == ""
    assert "names its .git wrongly" in check(str(workspace), "1:2")
    assert "not mounted here" in check(str(workspace), [1, 2])
    (workspace / ".git").mkdir()
    expected = list(identity(workspace / ".git"))
    assert "is not the repository's" in check(str(workspace), [expected[0], expected[1] + 1])
    # The right object, seen through the workspace's own (writable) mount: refused.
    assert "not read-only" in check(str(workspace), expected)
    assert "nothing ran" in check(str(workspace), expected)


def test_the_runner_checks_git_before_any_request_runs(workspace: Path) -> None:
    info = workspace.stat()
    request = {
        "kind": "bash",
        "command": "touch ran",
        "cwd": str(workspace),
        "timeout_ms": 5000,
        "workspace": str(workspace),
        "workspace_id": [info.st_dev, info.st_ino],
        "git_dir_id": [0, 0],
    }
    result = runner_module.handle(request, None)
    assert result["exit_code"] == -1 and "not mounted here" in result["error"]
    assert not (workspace / "ran").exists()
