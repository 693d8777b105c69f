"""The policy revision comes from git, also when the folder belongs to another account (the
packaged service runs as tooljail over a policy repository root owns)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from daemon.policy.revision import UNVERSIONED, policy_revision


def _git(folder: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    folder = tmp_path / "policies"
    folder.mkdir()
    (folder / "authz.rego").write_text("package tooljail.authz\n")
    _git(folder, "init", "-q")
    _git(folder, "add", ".")
    _git(folder, "commit", "-q", "-m", "policies")
    return folder


async def test_a_repository_gives_its_short_sha_and_dirty_when_changed(repository: Path) -> None:
    sha = _git(repository, "log", "-1", "--format=%h")
    assert await policy_revision(repository) == sha
    (repository / "authz.rego").write_text("package tooljail.authz\n# changed\n")
    assert await policy_revision(repository) == f"{sha}-dirty"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the repository to another uid")
async def test_another_accounts_repository_runs_nothing_and_is_unversioned(
    repository: Path, tmp_path: Path
) -> None:
    """Its owner could make git run a program (a clean filter, a hook) as the daemon: the
    daemon does not run git there at all."""
    marker = tmp_path / "ran"
    _git(repository, "config", "filter.review.clean", f"sh -c 'id > {marker}; cat'")
    (repository / ".git" / "info").mkdir(exist_ok=True)
    (repository / ".git" / "info" / "attributes").write_text("* filter=review\n")
    (repository / "authz.rego").write_text("package tooljail.authz\n# touched\n")
    for path in [repository, *repository.rglob("*")]:
        os.lchown(path, 1000, 1000)
    assert await policy_revision(repository) == UNVERSIONED
    assert not marker.exists(), "git ran the repository owner's filter as the daemon"


async def test_a_git_file_pointing_elsewhere_is_not_followed(tmp_path: Path) -> None:
    folder = tmp_path / "policies"
    folder.mkdir()
    (folder / ".git").write_text(f"gitdir: {tmp_path / 'elsewhere'}\n")
    assert await policy_revision(folder) == UNVERSIONED


async def test_a_folder_outside_git_is_unversioned(tmp_path: Path) -> None:
    assert await policy_revision(tmp_path) == UNVERSIONED
