"""The runner's folder as containers mount it: a copy with the modules' compiled forms beside
them.

Every container starts the runner, and its python compiles each module it imports from source
unless a valid compiled form lies in the `__pycache__` beside it; the folder is read-only in the
container, so none is ever written there, and compiling the runner's modules cost each container
about 12 ms of CPU (measured in the sandbox image). The daemon stages the folder when it
connects to the engine: a copy whose compiled forms are checked against their source's hash
before they are used (a stale one, or one for another interpreter, is ignored and the source
compiled as before).

What is staged runs as root in every container, so nothing found on disk is trusted: each
staging is made afresh under a random name (a folder left by an earlier start, however named,
is never reused: a compiled form can be forged to match its source's hash, attacker round
79), the folders above it may be written by root and the daemon's user alone (or be sticky),
and earlier stagings are removed without crossing into another filesystem.
"""

from __future__ import annotations

import importlib.util
import os
import py_compile
import secrets
import stat
import tempfile
from pathlib import Path

from sandbox.hardening import RUNNER_DIR as IN_CONTAINER
from sandbox.runner import RUNNER_DIR

#: What of the runner's folder is staged (its code and the shell file bash sources).
STAGED_SUFFIXES = (".py", ".sh")
_STAGED_PREFIX = "staged-"
_STAGING_PREFIX = ".staging-"
_CACHE = "__pycache__"


def stage_runner(parent: Path, source: Path = RUNNER_DIR) -> Path:
    """A new staged folder for `source` under `parent` (made if missing), earlier ones removed;
    its real path, which nobody but root and the daemon's user can change. PermissionError when
    a folder on the way may be written by someone else."""
    files = sorted(p for p in source.iterdir() if p.is_file() and p.suffix in STAGED_SUFFIXES)
    parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    parent = Path(os.path.realpath(parent))
    _require_trusted_chain(parent)
    for entry in parent.iterdir():
        if entry.name.startswith((_STAGED_PREFIX, _STAGING_PREFIX)):
            remove_staged(entry)
    target = parent / f"{_STAGED_PREFIX}{secrets.token_hex(8)}"
    staging = Path(tempfile.mkdtemp(prefix=_STAGING_PREFIX, dir=parent))
    try:
        _fill(staging, files)
        staging.rename(target)
    except BaseException:
        remove_staged(staging)
        raise
    return target


def _fill(staging: Path, files: list[Path]) -> None:
    (staging / _CACHE).mkdir(mode=0o755)
    for source in files:
        path = staging / source.name
        path.write_bytes(source.read_bytes())
        path.chmod(0o644)
        if path.suffix == ".py":
            compiled = Path(importlib.util.cache_from_source(str(path)))
            py_compile.compile(
                str(path),
                cfile=str(compiled),
                dfile=f"{IN_CONTAINER}/{path.name}",  # what a traceback in the container names
                doraise=True,
                invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH,
            )
            compiled.chmod(0o644)
    (staging / _CACHE).chmod(0o755)
    staging.chmod(0o755)


def _require_trusted_chain(folder: Path) -> None:
    """Every folder from `/` down to `folder` (a real path) may be written by root and the
    daemon's user alone, or is sticky (then only its owner may rename what another made in it):
    otherwise someone else could swap what containers mount (the engine resolves the path again
    for each one)."""
    trusted = {0, os.geteuid()}
    for current in (*reversed(folder.parents), folder):
        info = os.lstat(current)
        writable_by_others = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        if (
            not stat.S_ISDIR(info.st_mode)
            or info.st_uid not in trusted
            or (writable_by_others and not info.st_mode & stat.S_ISVTX)
            or (current == folder and writable_by_others)
        ):
            raise PermissionError(
                f"{current} may be written by someone else than root and the daemon's user: "
                "what is staged below it runs as root in every sandbox container"
            )


def remove_staged(folder: Path) -> None:
    """Remove a staged folder of the layout `_fill` makes (files, and files in __pycache__),
    on its own filesystem only: whatever else is there (a mount, a deeper folder, a link to a
    folder) is left, and so is the folder then."""
    try:
        top = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return
    try:
        device = os.fstat(top).st_dev
        for name in os.listdir(top):  # noqa: PTH208 - by descriptor: never looked up again
            info = os.lstat(name, dir_fd=top)
            if name == _CACHE and stat.S_ISDIR(info.st_mode) and info.st_dev == device:
                _remove_files(top, name, device)
            elif not stat.S_ISDIR(info.st_mode):
                os.unlink(name, dir_fd=top)
    except OSError:
        return
    finally:
        os.close(top)
    try:
        folder.rmdir()
    except OSError:
        return


def _remove_files(parent: int, name: str, device: int) -> None:
    inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)
    try:
        if os.fstat(inner).st_dev != device:
            return  # mounted over meanwhile
        for entry in os.listdir(inner):  # noqa: PTH208 - by descriptor
            if not stat.S_ISDIR(os.lstat(entry, dir_fd=inner).st_mode):
                os.unlink(entry, dir_fd=inner)
    finally:
        os.close(inner)
    os.rmdir(name, dir_fd=parent)
