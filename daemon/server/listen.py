"""Listener addresses: unix:///path/to.sock or host:port."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import grp
import os
import shutil
import socket
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from daemon.errors import TooljailError


def _refuse_shared_folder(folder: Path) -> None:
    """TooljailError when another account could swap the socket (or the folder it is bound
    in) for its own: the folder must belong to root or the daemon's user, and nobody else may
    write to it unless the sticky bit keeps them to their own entries (as in /tmp)."""
    info = folder.lstat()
    owner_ok = info.st_uid in (0, os.geteuid())
    shared = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not info.st_mode & stat.S_ISVTX
    if stat.S_ISLNK(info.st_mode) or not owner_ok or shared:
        raise TooljailError(
            f"the socket's folder {folder} can be changed by other accounts (owner uid "
            f"{info.st_uid}, mode {stat.S_IMODE(info.st_mode):o}), who could replace the socket; "
            "listen in a folder of root or the daemon's user that only they may write to"
        )


def _open_lock(path: Path) -> int:
    """The lock file, never through a link and only one of ours: in a folder others may write
    (a lock beside a socket in /tmp, say), a planted link would otherwise have the daemon
    truncate and write any file it can."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise TooljailError(
            f"cannot open the lock file {path} ({exc.strerror}); it must be a plain file of the "
            "daemon's user, not a link: remove it, or listen in a folder only the daemon writes"
        ) from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
        os.close(fd)
        raise TooljailError(
            f"the lock file {path} is not a plain file of the daemon's user; somebody else made "
            "it: remove it, or listen in a folder only the daemon writes"
        )
    return fd


@dataclass(frozen=True)
class ListenAddress:
    """A parsed listener address."""

    raw: str
    unix_path: Path | None
    _lock_fd: list[int] = field(default_factory=list, compare=False)
    _staging: list[Path] = field(default_factory=list, compare=False)

    @classmethod
    def parse(cls, raw: str) -> ListenAddress:
        """Parse unix:///abs/path or host:port."""
        if raw.startswith("unix://"):
            return cls(raw=raw, unix_path=Path(raw.removeprefix("unix://")))
        return cls(raw=raw, unix_path=None)

    @property
    def grpc_target(self) -> str:
        """The address as grpc's connect target."""
        return f"unix:{self.unix_path}" if self.unix_path else self.raw

    def bind_target(self) -> str:
        """Where the server binds. A Unix socket is bound inside a folder of its own that only
        this process may enter, so nobody can connect before `publish` gave it its mode and
        group and moved it into place."""
        if self.unix_path is None:
            return self.raw
        folder = Path(tempfile.mkdtemp(prefix=".bind-", dir=self.unix_path.parent))
        self._staging.append(folder)
        return f"unix:{folder / 's'}"

    def publish(self, mode: int, group: str) -> None:
        """Give the bound socket its permissions and group, then move it to its address. Done
        through descriptors of the staging folder and of the socket's folder, on an entry
        checked to be the socket this process bound: nothing is followed by name."""
        if self.unix_path is None or not self._staging:
            return
        folder = self._staging.pop()
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
        staging = os.open(folder, flags)
        parent = os.open(self.unix_path.parent, flags)
        try:
            info = os.lstat("s", dir_fd=staging)
            if not stat.S_ISSOCK(info.st_mode) or info.st_uid != os.geteuid():
                raise TooljailError(f"the socket bound in {folder} is not this daemon's; refusing")
            if group:
                os.chown("s", -1, grp.getgrnam(group).gr_gid, dir_fd=staging, follow_symlinks=False)
            _drop_access_acl(staging)
            os.chmod("s", mode, dir_fd=staging)  # checked above: our socket, in our own folder
            os.rename("s", self.unix_path.name, src_dir_fd=staging, dst_dir_fd=parent)
            os.rmdir(folder.name, dir_fd=parent)
        finally:
            os.close(staging)
            os.close(parent)

    @property
    def lock_path(self) -> Path | None:
        """The lock file held by the daemon that owns the socket."""
        return self.unix_path.with_name(self.unix_path.name + ".lock") if self.unix_path else None

    def prepare(self) -> None:
        """Make the socket's folder and take its lock; refuse when a live daemon holds it, or
        when the folder lets others replace what the daemon puts there."""
        if self.unix_path is None or self.lock_path is None:
            return
        self.unix_path.parent.mkdir(parents=True, exist_ok=True)
        _refuse_shared_folder(self.unix_path.parent)
        fd = _open_lock(self.lock_path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise TooljailError(
                f"another tooljail daemon holds {self.lock_path} and serves {self.unix_path}; "
                "stop it or choose another --listen address"
            ) from None
        self._lock_fd.append(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        if not self.unix_path.exists():
            return
        if not self.unix_path.is_socket():
            raise TooljailError(
                f"{self.unix_path} exists and is not a socket; refusing to replace it"
            )
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(1.0)
            try:
                probe.connect(str(self.unix_path))
            except OSError:
                # Nobody answers: a stale socket from a daemon that died. Safe to replace.
                with contextlib.suppress(FileNotFoundError):
                    self.unix_path.unlink()
                return
        raise TooljailError(
            f"another process is already listening on {self.unix_path}; stop it or choose "
            "another --listen address"
        )

    def cleanup(self) -> None:
        """Remove our socket file and release the lock (only if we hold it)."""
        if self.unix_path is None or not self._lock_fd:
            return
        with contextlib.suppress(FileNotFoundError):
            self.unix_path.unlink()
        for folder in self._staging:
            shutil.rmtree(folder, ignore_errors=True)
        fd = self._lock_fd.pop()
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _drop_access_acl(staging: int) -> None:
    """Remove the ACL the socket inherited from a default ACL of its folder: who may connect is
    `socket_mode` and `socket_group` alone (attacker round 101: a default ACL let the user nobody
    connect, as the admin principal, to a socket whose mode said 0660). Reached through the
    staging folder's descriptor; a filesystem without ACLs has none to remove."""
    try:
        os.removexattr(
            f"/proc/self/fd/{staging}/s", "system.posix_acl_access", follow_symlinks=False
        )
    except OSError as exc:
        if exc.errno not in (errno.ENODATA, errno.EOPNOTSUPP):
            raise
