"""The policy revision: the git commit of the policy folder, "-dirty" when its files differ.

git runs only in a repository that root or the daemon's own account owns (its folder, its
`.git` and that config): another account's repository could make git run its programs (a clean
filter, a hook) as the daemon, so it is "unversioned" without asking git. In a trusted one, git
runs with no hooks, no fsmonitor, no optional locks and none of the caller's GIT_* variables.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from daemon.host.child import run_child

UNVERSIONED = "unversioned"
_GIT_TIMEOUT_S = 10.0
_OUTPUT_CAP_BYTES = 64 * 1024


def trusted_repository(directory: Path) -> Path | None:
    """The top of the git work tree holding `directory` when root or this account owns it, its
    `.git` and the config there; None otherwise (or when `.git` is a file pointing elsewhere)."""
    trusted = {0, os.geteuid()}
    for folder in (directory, *directory.parents):
        try:
            dotgit = os.lstat(folder / ".git")
        except FileNotFoundError:
            continue
        except OSError:
            return None
        if not stat.S_ISDIR(dotgit.st_mode):
            return None
        try:
            owners = {os.lstat(folder).st_uid, dotgit.st_uid}
            config = folder / ".git" / "config"
            if os.path.lexists(config):
                owners.add(os.lstat(config).st_uid)
        except OSError:
            return None
        return folder if owners <= trusted else None
    return None


async def _git(top: Path, directory: Path, *args: str) -> str | None:
    confined = [
        *("-c", f"safe.directory={top}"),
        *("-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null"),
        "--no-optional-locks",
    ]
    environment = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    try:
        run = await run_child(
            ["git", *confined, "-C", str(directory), *args],
            timeout_s=_GIT_TIMEOUT_S,
            output_cap=_OUTPUT_CAP_BYTES,
            env=environment,
        )
    except OSError:
        return None
    return run.stdout.text().strip() if run.exit_code == 0 else None


async def policy_revision(directory: Path) -> str:
    """Short SHA of the last commit touching `directory`, plus "-dirty" if it has local changes."""
    top = trusted_repository(directory.resolve())
    if top is None:
        return UNVERSIONED
    sha = await _git(top, directory, "log", "-1", "--format=%h", "--", ".")
    if not sha:
        return UNVERSIONED
    dirty = await _git(top, directory, "status", "--porcelain", "--", ".")
    return f"{sha}-dirty" if dirty else sha
