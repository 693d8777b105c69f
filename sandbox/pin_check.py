"""Whether a container's workspace and repository pins are still what the daemon found.

The engine is given each pinned path by name and follows any symbolic link in it, on the host
(the mount's source) and in the container (its target). Looked at here just before the engine
is asked, with every sandbox that could change them held still (`sandbox.set_up_gate`), no link
followed anywhere on the way: what passes is what the engine mounts.
"""

from __future__ import annotations

import os

from sandbox.backend import SandboxSpec
from sandbox.openat2 import AT_FDCWD, RESOLVE_NO_MAGICLINKS, RESOLVE_NO_SYMLINKS, openat2
from sandbox.posix_acl import access_acl


class Moved(Exception):
    """A recorded path is no longer the object recorded for it; the message says why."""


def recorded_paths(spec: SandboxSpec) -> list[tuple[str, tuple[int, int]]]:
    """The workspace and each pin of `spec`, with the device and inode recorded for each."""
    return [(str(spec.workspace), spec.workspace_id)] + [
        (pin.path, pin.identity) for pin in spec.git_pins
    ]


def open_recorded(path: str, identity: tuple[int, int] | None) -> int:
    """`path` open as O_PATH, reached with no symbolic link on the way, when it is still the
    object `identity` names (None: whatever it is). Moved otherwise."""
    try:
        fd = openat2(AT_FDCWD, path, os.O_PATH, RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)
    except OSError as exc:
        raise Moved(
            f"{path} can no longer be reached without a symbolic link ({exc.strerror})"
        ) from exc
    info = os.fstat(fd)
    if identity is not None and (info.st_dev, info.st_ino) != tuple(identity):
        os.close(fd)
        raise Moved(f"{path} is another object than the one recorded (replaced meanwhile)")
    return fd


def moved_pin(spec: SandboxSpec) -> str:
    """Why the workspace or a pin of `spec` is no longer the object recorded for it, or a
    folder on their way no longer has the owner and mode recorded ("" when each still is,
    reached with no symbolic link on the way; an ACL counts as part of the mode). Asks the
    filesystem: off the event loop."""
    for path, identity in recorded_paths(spec):
        try:
            os.close(open_recorded(path, identity))
        except Moved as exc:
            return str(exc)
    for folder in spec.host_way:
        try:
            info = os.lstat(folder.path)
        except OSError as exc:
            return f"{folder.path} can no longer be looked at ({exc.strerror})"
        try:
            acl = access_acl(folder.path)
        except OSError as exc:
            return f"{folder.path} can no longer be looked at ({exc.strerror})"
        if (info.st_uid, info.st_gid, info.st_mode, acl) != (
            folder.uid,
            folder.gid,
            folder.mode,
            folder.acl,
        ):
            return (
                f"{folder.path} changed owner, mode or ACL since who could rename it was judged "
                "(changed meanwhile)"
            )
    return ""
