"""A filesystem that never answers: a FUSE mount whose server never replies, not even to the
kernel's first request. Every operation that reaches it waits until the mount is released, as on
a hung network or FUSE filesystem a tenant mounted. What the event loop must never touch.

Needs root (mount(2)) and /dev/fuse. Release aborts the connection: whatever waits on it then
fails (ENOTCONN) instead of hanging the test.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

_MS_NOSUID = 0x2
_MS_NODEV = 0x4
_MNT_DETACH = 0x2
_libc = ctypes.CDLL(None, use_errno=True)


def can_mount() -> bool:
    """True when this process may make a hung mount (root, with /dev/fuse)."""
    return os.geteuid() == 0 and os.path.exists("/dev/fuse")


class HungMount:
    """A hung filesystem mounted on a directory until `release`."""

    def __init__(self, target: Path) -> None:
        self.target = target
        self._device = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
        options = f"fd={self._device},rootmode=40000,user_id=0,group_id=0,allow_other"
        if (
            _libc.mount(
                b"tooljail-hung",
                os.fsencode(target),
                b"fuse",
                _MS_NOSUID | _MS_NODEV,
                options.encode(),
            )
            != 0
        ):
            code = ctypes.get_errno()
            os.close(self._device)
            raise OSError(code, os.strerror(code), str(target))
        self._lock = threading.Lock()
        self.released_by_watchdog = False

    def release(self) -> None:
        """Abort the connection (every waiter fails) and detach the mount; idempotent."""
        with self._lock:
            if self._device < 0:
                return
            os.close(self._device)
            self._device = -1
            _libc.umount2(os.fsencode(self.target), _MNT_DETACH)

    @contextlib.contextmanager
    def watchdog(self, seconds: float) -> Iterator[None]:
        """Release the mount after `seconds` if the block is still running: a test that hangs
        on it ends, and `released_by_watchdog` tells it that it hung."""

        def expire() -> None:
            if self._device >= 0:
                self.released_by_watchdog = True
                self.release()

        timer = threading.Timer(seconds, expire)
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()


@pytest.fixture
def hung_mount() -> Iterator[type[HungMount]]:
    """Mounts made with this factory are released when the test ends."""
    if not can_mount():
        pytest.skip("a hung mount needs root and /dev/fuse")
    made: list[HungMount] = []

    class Tracked(HungMount):
        def __init__(self, target: Path) -> None:
            super().__init__(target)
            made.append(self)

    yield Tracked
    for mount in made:
        mount.release()
