"""The runner's folder as containers mount it: a copy with the modules' compiled forms beside
them.

Every container starts the runner, and its python compiles each module it imports from source
unless a valid compiled form lies in the `__pycache__` beside it; the folder is read-only in the
container, so none is ever written there, and compiling the runner's modules cost each container
about 12 ms of CPU (measured in the sandbox image). The daemon stages the folder once: a copy
whose compiled forms are checked against their source's hash before they are used (a stale one,
or one for another interpreter, is ignored and the source compiled as before, never run).

A staged folder is named by a digest of its files and of this interpreter's bytecode version,
made under a temporary name and renamed into place whole, and never changed afterwards.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import py_compile
import shutil
import stat
import sys
import tempfile
from pathlib import Path

from sandbox.hardening import RUNNER_DIR as IN_CONTAINER
from sandbox.runner import RUNNER_DIR

#: What of the runner's folder is staged (its code and the shell file bash sources).
STAGED_SUFFIXES = (".py", ".sh")
_STAGING_PREFIX = ".staging-"


def stage_runner(parent: Path, source: Path = RUNNER_DIR) -> Path:
    """The staged folder for `source` under `parent` (made when missing; others removed).

    OSError when `parent` is not the daemon's alone (a link, someone else's, writable by
    others): what is staged there runs as root in every container.
    """
    files = sorted(p for p in source.iterdir() if p.is_file() and p.suffix in STAGED_SUFFIXES)
    contents = {path.name: path.read_bytes() for path in files}
    parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    _require_private(parent)
    target = parent / _digest(contents)
    if not target.is_dir():
        _make(parent, target, contents)
    _require_private(target)
    _remove_others(parent, keep=target.name)
    return target


def _digest(contents: dict[str, bytes]) -> str:
    digest = hashlib.sha256(importlib.util.MAGIC_NUMBER)
    digest.update(sys.implementation.cache_tag.encode())
    for name, data in sorted(contents.items()):
        digest.update(f"\0{name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()[:32]


def _make(parent: Path, target: Path, contents: dict[str, bytes]) -> None:
    staging = Path(tempfile.mkdtemp(prefix=_STAGING_PREFIX, dir=parent))
    try:
        for name, data in contents.items():
            path = staging / name
            path.write_bytes(data)
            path.chmod(0o644)
            if path.suffix == ".py":
                py_compile.compile(
                    str(path),
                    cfile=importlib.util.cache_from_source(str(path)),
                    # What a traceback in the container names.
                    dfile=f"{IN_CONTAINER}/{name}",
                    doraise=True,
                    invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH,
                )
        for path in staging.rglob("*"):
            path.chmod(0o755 if path.is_dir() else 0o644)
        staging.chmod(0o755)
        try:
            staging.rename(target)
        except OSError:
            if not target.is_dir():  # not another daemon's staging of the same files
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _require_private(folder: Path) -> None:
    info = os.lstat(folder)
    if (
        not stat.S_ISDIR(info.st_mode)
        or info.st_uid != os.geteuid()
        or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    ):
        raise PermissionError(
            f"{folder} must be a folder of the daemon's user that nobody else may write (what "
            "is staged there runs as root in every sandbox container)"
        )


def _remove_others(parent: Path, keep: str) -> None:
    """Earlier versions' folders (their containers were reaped when this daemon started)."""
    for entry in parent.iterdir():
        if entry.name != keep and not entry.is_symlink() and entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
