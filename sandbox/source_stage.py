"""Bind-mount sources the engine cannot be steered away from.

The engine takes each bind mount's source as a path and resolves it on the host, as root,
following any symbolic link on the way. A host account that can rename the workspace or a
folder on the way to one of its pins (its owner, for a user's own project) could swap in a link
while a container is made, and have a folder it may not enter mounted into a container whose
processes run as itself (attacker round 125). A root daemon therefore hands the engine no path
such an account controls: it opens each source with no link followed anywhere (openat2), checks
that it is the object recorded for it, binds that very object by its descriptor onto a folder
of its own (root's, mode 0700, a private mount so nothing propagates), and names that folder
as the source. The bind is undone once the container has started: the container keeps its own.

The engine must see the daemon's mounts: it must share the daemon's mount namespace (looked at
through the engine socket's peer). A daemon that is not root, or whose engine lives elsewhere,
stages nothing and says so once; the runner's check of what it was given stays either way.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import socket
import stat
import struct
import uuid
from collections.abc import Iterator
from pathlib import Path

from sandbox.backend import SET_UP_CHANGED, SandboxSpec, SandboxStartError
from sandbox.mount_check import read_mount_points
from sandbox.pin_check import Moved, open_recorded, recorded_paths

log = logging.getLogger(__name__)

_MS_BIND = 0x1000
_MS_REC = 0x4000
_MS_PRIVATE = 1 << 18
_MNT_DETACH = 2

_libc = ctypes.CDLL(None, use_errno=True)


def _mount(source: str | None, target: str, flags: int) -> None:
    encoded = os.fsencode(source) if source is not None else None
    if _libc.mount(encoded, os.fsencode(target), None, ctypes.c_ulong(flags), None) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), target)


def _unmount(target: str) -> None:
    if _libc.umount2(os.fsencode(target), _MNT_DETACH) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), target)


def engine_pid(socket_path: str) -> int | None:
    """The process answering on the engine's Unix socket (SO_PEERCRED); None when it cannot be
    told (not a Unix socket, unreachable)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(5.0)
            conn.connect(socket_path)
            pid, _, _ = struct.unpack(
                "3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
            )
    except OSError:
        return None
    return pid or None


def _same_mounts(pid: int) -> bool:
    try:
        return Path("/proc/self/ns/mnt").readlink() == Path(f"/proc/{pid}/ns/mnt").readlink()
    except OSError:
        return False


class SourceStage:
    """Where a root daemon binds the objects it checked, for the engine to mount (see the
    module's text)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @classmethod
    def open(cls, root: Path, engine: int | None) -> SourceStage | None:
        """The stage at `root` (made, cleared of a crashed run's binds, a private mount), or
        None when this daemon cannot stage for the engine at process `engine`."""
        if os.geteuid() != 0:
            why = "the daemon is not root (it may not mount)"
        elif engine is None:
            why = "the engine's process cannot be told (not a local Unix socket)"
        elif not _same_mounts(engine):
            why = "the engine does not share the daemon's mount namespace"
        else:
            try:
                return cls._made(root)
            except OSError as exc:
                why = f"{root} could not be made a private mount ({exc.strerror})"
        log.warning(
            "sandbox mounts are given to the engine by path (%s): a host account that can "
            "rename a workspace's folders could have the engine mount a folder it may not "
            "enter into that workspace's containers, which run as that account "
            "(docs/operations.md, 'Other local users')",
            why,
        )
        return None

    @classmethod
    def _made(cls, root: Path) -> SourceStage:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chown(root, 0, 0)
        root.chmod(0o700)
        stage = cls(root)
        if str(root) not in read_mount_points("self"):
            _mount(str(root), str(root), _MS_BIND)
        _mount(None, str(root), _MS_PRIVATE)
        for left in root.iterdir():  # a crashed run's
            stage._release(left)
        return stage

    def close(self) -> None:
        """Undo what is left here and the stage's own mount: a daemon that stops leaves no
        mount behind."""
        for left in self.root.iterdir():
            self._release(left)
        try:
            _unmount(str(self.root))
        except OSError as exc:
            log.warning("could not unmount the sandbox sources' stage %s: %s", self.root, exc)

    @contextlib.contextmanager
    def holding(self, spec: SandboxSpec) -> Iterator[dict[str, str]]:
        """The workspace and each pin of `spec` bound here, each checked to be the object
        recorded for it and reached with no link followed; yields the source to give the engine
        for each path. Unbound when the block ends. SandboxStartError(SET_UP_CHANGED) when one
        is not what was recorded (the detail goes to the log)."""
        folder = self.root / uuid.uuid4().hex
        folder.mkdir(mode=0o700)
        bound: list[str] = []
        try:
            wanted = recorded_paths(spec)
            for number, (path, identity) in enumerate(wanted):
                bound.append(self._bind(path, identity, folder / str(number)))
            yield {path: source for (path, _), source in zip(wanted, bound, strict=True)}
        finally:
            self._release(folder, bound)

    def _bind(self, path: str, identity: tuple[int, int], target: Path) -> str:
        try:
            fd = open_recorded(path, identity if identity != (0, 0) else None)
        except Moved as exc:
            log.warning("no sandbox container made: %s", exc)
            raise SandboxStartError(SET_UP_CHANGED) from exc
        try:
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                target.mkdir(mode=0o700)
            else:
                target.touch(mode=0o600)
            _mount(f"/proc/self/fd/{fd}", str(target), _MS_BIND | _MS_REC)
        finally:
            os.close(fd)
        return str(target)

    def _release(self, folder: Path, bound: list[str] | None = None) -> None:
        """Unbind what `folder` holds (`bound`, or what the mount table says) and remove it.
        Never a recursive removal: a bind that could not be undone would have it delete the
        workspace's files; each entry is removed alone (a folder only when empty, a mount point
        never), and what stays is logged."""
        mounted = set(read_mount_points("self") if bound is None else bound)
        entries = sorted(folder.iterdir()) if folder.is_dir() else []
        for entry in entries:
            if str(entry) in mounted:
                try:
                    _unmount(str(entry))
                except OSError as exc:
                    log.warning("could not unbind staged sandbox source %s: %s", entry, exc)
        try:
            for entry in entries:
                if entry.is_symlink() or not entry.is_dir():
                    entry.unlink()
                else:
                    entry.rmdir()
            folder.rmdir()
        except OSError as exc:
            log.warning("staged sandbox sources left in %s: %s", folder, exc)
