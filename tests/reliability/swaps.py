"""Swapping names under a running call: an atomic exchange of a real directory and a symlink,
as fast as a thread can, to race the daemon's path checks."""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path

import pytest


def symlink(link: Path, target: Path | str) -> Path:
    """Make `link` point at `target`; returns the link."""
    link.symlink_to(target)
    return link


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def exchange(first: Path, second: Path) -> None:
    """Atomically swap two names (renameat2 RENAME_EXCHANGE)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.renameat2(_AT_FDCWD, bytes(first), _AT_FDCWD, bytes(second), _RENAME_EXCHANGE):
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno), str(first))


class Flipper:
    """Swaps a real directory and a symlink to the outside folder as fast as it can."""

    def __init__(self, real: Path, link: Path) -> None:
        self._names = (real, link)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.flips = 0

    def _run(self) -> None:
        while not self._stop.is_set():
            exchange(*self._names)
            self.flips += 1

    def __enter__(self) -> Flipper:
        try:
            exchange(*self._names)
            exchange(*self._names)
        except OSError as exc:
            pytest.skip(f"renameat2(RENAME_EXCHANGE) is not available here: {exc}")
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
