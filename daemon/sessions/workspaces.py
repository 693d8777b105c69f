"""Where a session works: its workspace pinned by descriptor, the identity its sandboxes run as,
and how workspaces of open sessions may not overlap.

- A workspace is pinned once (`PinnedDirectory.pin`: no symbolic link in any component) and
  checked again before everything that uses it; a path that goes through a symlink is refused
  rather than followed (naming the real path only to the operator: it is the daemon's view).
- Sandboxes never run as root. Over a workspace owned by a regular user (uid >= min_uid) they run
  as that user, so files made in a user's own project stay theirs; otherwise as the dedicated
  account (`sandbox.user`), which must be able to write the workspace. Workspaces tooljail makes
  itself are handed to their principal's own uid (`principal_uids`) with that account's group,
  and their sandboxes run as it: the kernel's per-user limits are then no tenant's to take from
  another.
- Two open sessions whose workspaces are the same directory, or one inside the other, overlap:
  the policy sees the overlaps and refuses them unless it allows them explicitly.
"""

from __future__ import annotations

import logging
import os
import pwd
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NamedTuple

from daemon.errors import RequestError
from daemon.host.confine import is_inside
from daemon.host.pinned import NotPinnable, PinnedDirectory
from daemon.sessions.principal_uids import PrincipalUids
from daemon.text import wire_safe
from sandbox.backend import WayFolder
from sandbox.posix_acl import access_acl, acl_writers

log = logging.getLogger(__name__)

Relation = Literal["same", "inside", "contains"]


@dataclass(frozen=True)
class Overlap:
    """An open session whose workspace overlaps the one asked for."""

    session: str
    workspace: str
    relation: Relation
    """same: the same directory; inside: the one asked for is inside it; contains: it is inside
    the one asked for."""


def written_path(raw: str) -> Path:
    """A workspace as the caller wrote it, made absolute and normal without looking at the disk
    (RequestError for what can never be one)."""
    if "\x00" in raw or not raw.startswith("/"):
        raise RequestError("workspace must be an absolute path to an existing directory")
    return Path(os.path.normpath(raw))


def pin_workspace(raw: str, *, tell_real_path: bool = True) -> PinnedDirectory:
    """Pin an existing directory; RequestError saying what is wrong with it. The hint of its
    real path (links followed, by the daemon, often root) is for the operator's own paths only:
    told to a caller, it named where any link leads, /proc/self/fd's and /root's included
    (attacker round 116)."""
    path = written_path(raw)
    try:
        return PinnedDirectory.pin(path)
    except NotPinnable as exc:
        if not tell_real_path:
            raise RequestError(
                f"workspace {path} cannot be used: {exc.strerror}; give the directory's own "
                "path, with no symbolic link in it"
            ) from exc
        try:
            real = os.path.realpath(path)
        except OSError:  # it changes while it is looked at: no hint then
            real = str(path)
        shown = wire_safe(real)
        hint = f"; its real path is {real}, give that" if real != str(path) else ""
        if shown != real:
            hint = f"; its real path {shown} is not valid UTF-8, which no request can name"
        raise RequestError(f"workspace {path} cannot be used: {exc.strerror}{hint}") from exc


def overlaps_of(root: PinnedDirectory, others: dict[str, PinnedDirectory]) -> list[Overlap]:
    """The open sessions (by id) whose workspace overlaps `root`."""
    found = []
    for session_id, other in others.items():
        same = other.identity == root.identity
        relation = "same" if same else relation_of(other.path, root.path)
        if relation is not None:
            found.append(Overlap(session_id, str(other.path), relation))
    return found


def relation_of(other: Path, path: Path) -> Relation | None:
    """How the workspace at `path` lies to an open session's at `other`, by their paths."""
    if other == path:
        return "same"
    if is_inside(other, path):
        return "inside"
    if is_inside(path, other):
        return "contains"
    return None


def give_to(folder: Path, owner: tuple[int, int] | None) -> None:
    """Hand a workspace tooljail made, in a folder only the daemon writes, to `owner`
    (`hand_over`)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        hand_over(fd, owner)
    finally:
        os.close(fd)


def hand_over(fd: int, owner: tuple[int, int] | None, *, group_writable: bool = False) -> None:
    """Hand the workspace open at `fd` to `owner` (see SessionStore.fresh_owner): the account
    itself (0750), or only its group with group write (uid -1: 0770), so that a daemon that is
    not root still makes workspaces its sandboxes can write; `group_writable`: its group writes
    it in any case, and only who made an entry may rename or remove it (01770, `SHARED_ROOT`:
    principals with uids of their own share it). Through the descriptor: a path could be
    swapped for a symlink to another folder in between. No setgid bit: what sandboxes write
    carries their own group anyway."""
    if owner is not None:
        os.fchown(fd, *owner)
    if group_writable:
        os.fchmod(fd, SHARED_ROOT)
        return
    by_group = owner is not None and owner[0] == -1
    os.fchmod(fd, 0o770 if by_group else 0o750)


SHARED_ROOT = 0o770 | stat.S_ISVTX
"""A workspace principals share: its group writes it, and the sticky bit keeps each principal's
entries at its root its own to rename or remove (attacker round 135: a tenant swapped another's
`.git` for its own and back while the other's `git status` ran)."""


def make_workspace(
    folder: Path, owner: tuple[int, int] | None, *, group_writable: bool = False
) -> tuple[int, int]:
    """Make `folder` (its parent exists, with no symlink on the way) and hand it to `owner`;
    its (device, inode). Whoever can write the parent cannot steer this at another folder: the
    new one is opened without following links and handed over through its descriptor. When
    that fails it goes again, so a later attempt does not find a half-made workspace."""
    pinned = PinnedDirectory.pin(folder.parent)
    parent = pinned.fd
    try:
        os.mkdir(folder.name, 0o700, dir_fd=parent)
        fd = os.open(
            folder.name,
            os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
            dir_fd=parent,
        )
        try:
            made = os.fstat(fd)
            try:
                hand_over(fd, owner, group_writable=group_writable)
            except BaseException:
                _remove_if_same(parent, folder.name, made)
                raise
            return made.st_dev, made.st_ino
        finally:
            os.close(fd)
    finally:
        pinned.close()


def _remove_if_same(parent: int, name: str, made: os.stat_result) -> None:
    """Remove `name` in `parent` when it is still the folder made (never another one)."""
    try:
        now = os.stat(name, dir_fd=parent, follow_symlinks=False)
        if (now.st_dev, now.st_ino) == (made.st_dev, made.st_ino):
            os.rmdir(name, dir_fd=parent)
    except OSError:
        pass


@dataclass(frozen=True)
class IdentityRule:
    """Who the sandboxes of a workspace run as (sandbox.user, sandbox.min_uid,
    sandbox.run_as_owner, and the principals' own uids)."""

    user: str
    """The dedicated account's name (or uid)."""
    min_uid: int
    run_as_owner: bool
    principal_uids: PrincipalUids | None = None
    """Where each principal's own uid comes from (None: every principal's sandboxes over the
    workspaces tooljail makes run as the dedicated account)."""

    def dedicated(self) -> tuple[int, int]:
        """The dedicated account's uid and gid; RequestError when it cannot be used."""
        try:
            entry = pwd.getpwuid(int(self.user)) if self.user.isdigit() else pwd.getpwnam(self.user)
        except (KeyError, ValueError) as exc:
            raise RequestError(
                f"the sandbox account sandbox.user={self.user!r} does not exist on this machine: "
                "create it (make setup does) or set sandbox.user to an existing account"
            ) from exc
        if entry.pw_uid < self.min_uid or entry.pw_gid == 0:
            raise RequestError(
                f"sandbox.user={self.user!r} has uid {entry.pw_uid} and gid {entry.pw_gid}: "
                f"sandboxes may not run below uid sandbox.min_uid={self.min_uid} or as group 0"
            )
        return entry.pw_uid, entry.pw_gid

    def made_by_sandboxes(self, uid: int) -> bool:
        """Whether only tooljail's sandboxes have `uid`: a principal's own, which no person
        has. Not the dedicated account's, which owns the default workspace and which an
        operator may act as (attacker round 130: a repository made so was taken for the
        model's, and the model wrote its hooks)."""
        return self.principal_uids is not None and uid in self.principal_uids.range

    def for_principal(self, principal: str) -> tuple[int, int]:
        """The identity the sandboxes of a workspace tooljail made for `principal` run as: the
        principal's own uid with the dedicated account's group (the dedicated account itself
        when principals have no uids of their own)."""
        uid, gid = self.dedicated()
        if self.principal_uids is not None:
            uid = self.principal_uids.uid_of(principal)
        return uid, gid

    def for_fresh(self, root: PinnedDirectory, principal: str) -> tuple[int, int]:
        """`for_principal`, once the workspace made for it is known to be writable so."""
        uid, gid = self.for_principal(principal)
        if not _writable(root, uid, gid):
            raise RequestError(
                f"the workspace made at {root.path} belongs to {root.uid}:{root.gid} with mode "
                f"{root.mode:o}, which its sandboxes ({uid}:{gid}) cannot write: run "
                "the daemon as root, or as a member of sandbox.user's group"
            )
        return uid, gid

    def for_workspace(self, root: PinnedDirectory, principal: str | None = None) -> tuple[int, int]:
        """The identity sandboxes of this workspace run as, for a session of `principal` (None:
        the default workspace's, every principal's); RequestError, naming the settings, when
        no allowed identity can write it, or when it is a principal's own and not `principal`'s."""
        uids = self.principal_uids
        if uids is not None and root.uid in uids.range:
            # A principal's own uid is never another's (attacker round 110: a session over a
            # folder a tenant made ran as that tenant's uid, whoever opened it).
            if principal is None or uids.given(principal) != root.uid:
                raise RequestError(
                    f"workspace {root.path} belongs to uid {root.uid}, which another "
                    "principal's sandboxes run as: open the session over a directory of your "
                    "own, or a fresh one"
                )
            return root.uid, self.dedicated()[1]
        if self.run_as_owner and root.uid >= self.min_uid and root.gid != 0:
            return root.uid, root.gid
        uid, gid = self.dedicated()
        if not _writable(root, uid, gid):
            if not self.run_as_owner:
                why = "sandbox.run_as_owner is off"
            elif root.uid < self.min_uid:
                why = f"uid {root.uid} is below sandbox.min_uid={self.min_uid}"
            else:
                why = "its group is root's"
            raise RequestError(
                f"workspace {root.path} belongs to {root.uid}:{root.gid}, so sandboxes there run "
                f"as sandbox.user={self.user!r} (uid {uid}; {why}), which cannot write it: make "
                f"it that account's (chown {uid}:{gid}), or open the session over a directory "
                "of a regular user"
            )
        return uid, gid

    def host_changers(self, root: PinnedDirectory, inside: Iterable[str] = ()) -> HostLook:
        """The accounts of this host, other than root, the daemon's and the sandboxes' own, that
        could rename or replace the workspace, a folder above it, or a folder inside it on the
        way to one of the paths `inside` (the repository's pins: attacker round 127 made one
        world-writable), as they own one; None when anyone might (a folder writable by another
        group, or by anyone without the sticky bit, or one that cannot be looked at). No
        freezing of sandboxes stops them while a container is made, and the engine follows
        links there as root (SandboxSpec.no_root). With the folders as they were judged
        (SandboxSpec.host_way). Asks the filesystem: off the event loop."""
        folders = {root.path, *root.path.parents}
        for path in map(Path, inside):
            folders.update(way for way in (path, *path.parents) if is_inside(root.path, way))
        way = []
        for folder in sorted(folders):
            try:
                info = os.lstat(folder)
                acl = access_acl(str(folder))
            except OSError:
                return HostLook(None, ())
            way.append(
                WayFolder(
                    path=str(folder), uid=info.st_uid, gid=info.st_gid, mode=info.st_mode, acl=acl
                )
            )
        return HostLook(self._changers_on(way), tuple(way))

    def _changers_on(self, way: Iterable[WayFolder]) -> frozenset[int] | None:
        uids = {0, os.geteuid()}
        gids = {0, os.getegid()}
        try:
            uid, gid = self.dedicated()
        except RequestError:
            pass
        else:
            uids.add(uid)
            gids.add(gid)
        own = self.principal_uids.range if self.principal_uids is not None else range(0)
        changers: set[int] = set()
        for folder in way:
            if folder.mode & 0o020 and folder.gid not in gids:
                return None
            if folder.mode & 0o002 and not folder.mode & stat.S_ISVTX:
                return None
            try:
                # Round 126's lead: an ACL names writers the mode's bits do not show.
                named = acl_writers(folder.acl)
            except ValueError:
                return None
            if named.groups - gids:
                return None
            owners = {folder.uid, *named.users}
            changers.update(uid for uid in owners if uid not in uids and uid not in own)
        return frozenset(changers)


class HostLook(NamedTuple):
    """Who on the host could change a workspace's paths (IdentityRule.host_changers)."""

    changers: frozenset[int] | None
    """Their uids; None: anyone might."""
    way: tuple[WayFolder, ...]
    """The folders judged, as they were."""


def _writable(root: PinnedDirectory, uid: int, gid: int) -> bool:
    return bool(
        (root.uid == uid and root.mode & 0o200)
        or (root.gid == gid and root.mode & 0o020)
        or root.mode & 0o002
    )


def made_sessions_root(path: Path) -> Path:
    """The sessions root at `path` by real path, made (the daemon's alone) if missing."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return Path(os.path.realpath(path))


def keep_others_out(root: Path) -> None:
    """Close the sessions root `root` to everyone but the daemon's user when it is theirs;
    RequestError when it is someone else's and lets others in. No one else needs to pass (the
    engine mounts each container's workspace), and anyone who could reached every workspace a
    command made world-writable (attacker round 181: another local user's subvolumes took
    unbudgeted room and steered deletions)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        mode = stat.S_IMODE(info.st_mode)
        if not mode & 0o077:
            return
        if info.st_uid != os.geteuid():
            raise RequestError(
                f"the sessions root {root} lets others than its owner in (mode {mode:o}) and "
                "is not the daemon's to close: make it the daemon user's, mode 0700"
            )
        os.fchmod(fd, 0o700)
    finally:
        os.close(fd)
    # A process that entered a workspace before keeps its way in (attacker round 182: one of
    # another user's, in a workspace a command had made world-writable, made subvolumes there
    # after an upgrade from 0711). Only the operator can tell them from the daemon's own.
    log.warning(
        "the sessions root %s let others than its owner in (mode %o) and is now 0700; processes "
        "of other users that entered a workspace before keep their way in until they end: "
        "list them with `ls -l /proc/*/cwd /proc/*/fd 2>/dev/null | grep -F %s/` (the daemon's "
        "and its sandboxes' are listed too)",
        root,
        mode,
        root,
    )
