"""The policy revision: the git commit of the policy folder, "-dirty" when its files differ."""

from __future__ import annotations

from pathlib import Path

from daemon.host.child import run_child

UNVERSIONED = "unversioned"
_GIT_TIMEOUT_S = 10.0
_OUTPUT_CAP_BYTES = 64 * 1024


async def _git(directory: Path, *args: str) -> str | None:
    # The policy folder is trusted (it is the policy), but often another account's (root's, read
    # by the service's account): name it safe for this call only, and run nothing the
    # repository's own config names (fsmonitor), whoever wrote it.
    trust = ["-c", f"safe.directory={directory}", "-c", "core.fsmonitor=false"]
    try:
        run = await run_child(
            ["git", *trust, "-C", str(directory), *args],
            timeout_s=_GIT_TIMEOUT_S,
            output_cap=_OUTPUT_CAP_BYTES,
        )
    except OSError:
        return None
    return run.stdout.text().strip() if run.exit_code == 0 else None


async def policy_revision(directory: Path) -> str:
    """Short SHA of the last commit touching `directory`, plus "-dirty" if it has local changes."""
    sha = await _git(directory, "log", "-1", "--format=%h", "--", ".")
    if not sha:
        return UNVERSIONED
    dirty = await _git(directory, "status", "--porcelain", "--", ".")
    return f"{sha}-dirty" if dirty else sha
