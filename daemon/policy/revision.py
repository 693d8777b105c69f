"""The policy revision: the git commit of the policy folder, "-dirty" when its files differ."""

from __future__ import annotations

import subprocess
from pathlib import Path

UNVERSIONED = "unversioned"


def _git(directory: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(directory), *args],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def policy_revision(directory: Path) -> str:
    """Short SHA of the last commit touching `directory`, plus "-dirty" if it has local changes."""
    sha = _git(directory, "log", "-1", "--format=%h", "--", ".")
    if not sha:
        return UNVERSIONED
    dirty = _git(directory, "status", "--porcelain", "--", ".")
    return f"{sha}-dirty" if dirty else sha
