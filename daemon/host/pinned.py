"""Directories held by descriptor, and opens the kernel keeps beneath them.

A workspace is pinned once: its path is resolved with no symbolic link in any component
(`openat2` with RESOLVE_NO_SYMLINKS) and the directory is kept open (O_PATH) with its device and
inode. `verify` proves the path still names that same directory (`verify_on_loop` without
asking any filesystem, daemon.host.loop_safe); `open_beneath` opens a file relative to the held
descriptor with RESOLVE_BENEATH and RESOLVE_NO_SYMLINKS, so whatever is renamed or swapped
meanwhile, the kernel never lets the open leave the pinned directory or follow a symbolic link.

Pinning asks the filesystem (a stat, a statfs): it blocks on a hung one, so it is never done on
the event loop.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from dataclasses import dataclass, replace
from pathlib import Path

from daemon.host.devices import served_locally
from daemon.host.loop_safe import NeedsThread, descriptor_identity
from daemon.host.statfs import TMPFS_MAGIC, filesystem_type
from sandbox.openat2 import (
    AT_FDCWD,
    RESOLVE_BENEATH,
    RESOLVE_CACHED,
    RESOLVE_NO_MAGICLINKS,
    RESOLVE_NO_SYMLINKS,
    RESOLVE_NO_XDEV,
    openat2,
)


class NotPinnable(OSError):
    """The path cannot be pinned: a symbolic link in it, not a directory, or gone."""


class WorkspaceMoved(OSError):
    """The pinned path no longer names the pinned directory."""


@dataclass(frozen=True)
class PinnedDirectory:
    """A directory held open, with the path it was pinned at."""

    path: Path
    """Absolute, with no symbolic link in any component."""
    fd: int
    """O_PATH descriptor of the directory itself."""
    device: int
    inode: int
    uid: int
    """Owner, as it was when pinned."""
    gid: int
    mode: int
    """Permission bits, as they were when pinned."""
    mount_id: int = -1
    """The mount it was pinned on (-1: not known, so `verify_on_loop` always defers)."""
    local: bool = False
    """On a filesystem served by the machine itself (daemon.host.devices): its files'
    attributes, and bytes in the page cache, may be read on the event loop."""
    in_memory: bool = False
    """On tmpfs: its files' bytes are in memory (`read_cached`)."""

    @classmethod
    def pin(cls, path: Path) -> PinnedDirectory:
        """Pin `path` (absolute, normalised); NotPinnable saying why when it cannot be."""
        if not path.is_absolute() or os.path.normpath(path) != str(path):
            raise NotPinnable(errno.EINVAL, "not an absolute, normalised path", str(path))
        try:
            fd = openat2(
                AT_FDCWD,
                str(path),
                os.O_PATH | os.O_DIRECTORY,
                RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
            )
        except OSError as exc:
            why = {
                errno.ELOOP: "a component of it is a symbolic link",
                errno.ENOTDIR: "it (or a component of it) is not a directory",
                errno.ENOENT: "it does not exist",
            }.get(exc.errno or 0, exc.strerror or str(exc))
            raise NotPinnable(exc.errno or errno.EINVAL, why, str(path)) from exc
        try:
            info = os.fstat(fd)
            mount_id, _ = descriptor_identity(fd)
            local = served_locally(fd, mount_id)
            in_memory = filesystem_type(fd) == TMPFS_MAGIC
        except OSError as exc:
            os.close(fd)
            raise NotPinnable(exc.errno or errno.EIO, exc.strerror or str(exc), str(path)) from exc
        return cls(
            path=path,
            fd=fd,
            device=info.st_dev,
            inode=info.st_ino,
            uid=info.st_uid,
            gid=info.st_gid,
            mode=stat.S_IMODE(info.st_mode),
            mount_id=mount_id,
            local=local,
            in_memory=in_memory,
        )

    @property
    def identity(self) -> tuple[int, int]:
        """(device, inode): what a sandbox checks its mounted workspace against."""
        return self.device, self.inode

    def verify(self) -> None:
        """WorkspaceMoved unless the path still names the pinned directory, without symlinks,
        and the held descriptor is still that directory (not one released and reused)."""
        try:
            held = os.fstat(self.fd)
        except OSError as exc:
            raise WorkspaceMoved(
                exc.errno or errno.EBADF, "it was released", str(self.path)
            ) from exc
        if (held.st_dev, held.st_ino) != self.identity:
            raise WorkspaceMoved(errno.ESTALE, "it was released", str(self.path))
        fd = self._open_path(cached=False)
        try:
            info = os.fstat(fd)
            mount_id, _ = descriptor_identity(fd)
        finally:
            os.close(fd)
        if (info.st_dev, info.st_ino) != self.identity or mount_id != self.mount_id:
            raise WorkspaceMoved(errno.ESTALE, "another directory is there now", str(self.path))

    def verify_on_loop(self) -> None:
        """`verify` from the kernel's caches and records alone, never asking a filesystem (one
        mounted over the path may be hung): WorkspaceMoved as `verify` does; NeedsThread when
        the path cannot be looked up that way (not cached), so `verify` must run in a thread."""
        if self.mount_id < 0:
            raise NeedsThread(str(self.path))
        try:
            held = descriptor_identity(self.fd)
        except OSError as exc:
            raise WorkspaceMoved(
                exc.errno or errno.EBADF, "it was released", str(self.path)
            ) from exc
        if held != (self.mount_id, self.inode):
            raise WorkspaceMoved(errno.ESTALE, "it was released", str(self.path))
        fd = self._open_path(cached=True)
        try:
            found = descriptor_identity(fd)
        finally:
            os.close(fd)
        if found != (self.mount_id, self.inode):
            # Another mount or another directory: the same one bound again elsewhere is refused
            # too (a new session can be opened over it).
            raise WorkspaceMoved(errno.ESTALE, "another directory is there now", str(self.path))

    def _open_path(self, *, cached: bool) -> int:
        """The pinned path opened again (O_PATH, no symbolic link on the way); WorkspaceMoved
        when it cannot be, NeedsThread when `cached` and the lookup needs the filesystem."""
        try:
            return openat2(
                AT_FDCWD,
                str(self.path),
                os.O_PATH | os.O_DIRECTORY,
                RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | (RESOLVE_CACHED if cached else 0),
            )
        except OSError as exc:
            if cached and exc.errno == errno.EAGAIN:
                raise NeedsThread(str(self.path)) from exc
            raise WorkspaceMoved(exc.errno or errno.EINVAL, exc.strerror, str(self.path)) from exc

    def open_beneath(
        self, relative: str, flags: int, *, same_mount: bool = False, cached: bool = False
    ) -> int:
        """Open `relative` (no leading '/') beneath the pinned directory: never outside it, never
        through a symbolic link, whatever changes meanwhile (EXDEV or ELOOP otherwise); with
        `same_mount`, never onto another mount either (EXDEV); with `cached`, only through
        lookups the kernel answers from its caches (EAGAIN otherwise)."""
        return openat2(
            self.fd,
            relative or ".",
            flags,
            RESOLVE_BENEATH
            | RESOLVE_NO_SYMLINKS
            | RESOLVE_NO_MAGICLINKS
            | (RESOLVE_NO_XDEV if same_mount else 0)
            | (RESOLVE_CACHED if cached else 0),
        )

    def duplicate(self) -> PinnedDirectory:
        """The same directory on a descriptor of its own, which the caller closes."""
        return replace(self, fd=os.dup(self.fd))

    def close(self) -> None:
        """Release the descriptor (the directory itself is left alone). The number is forgotten:
        the kernel hands it to the next open, and a late user must get EBADF, not whatever
        directory (another session's) it names by then."""
        fd = self.fd
        if fd < 0:
            return
        object.__setattr__(self, "fd", -1)  # frozen for everyone else; this is its release
        with contextlib.suppress(OSError):
            os.close(fd)
