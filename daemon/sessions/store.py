"""Sessions by id, each owned by the principal that opened it: every principal's default session
(over the configured workspace, or a folder of its own: `OwnDefaults`), and sessions opened by
callers, each with a workspace of its own
(fresh under the sessions root, or an existing directory the policy allows) pinned by descriptor,
the identity its sandboxes run as, its read-state, and an idle TTL after which it is closed.

A session is found only by its owner (or an admin principal): anyone else is told it does not
exist, exactly as for an id never issued, so nothing of it leaks. Ids are random and say nothing
about the session or its workspace.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import secrets
import shutil
import stat
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from daemon.errors import NotFound, Overloaded, RequestError
from daemon.host.confine import is_inside
from daemon.host.pinned import PinnedDirectory
from daemon.sessions.session import Session
from daemon.sessions.workspaces import (
    HostLook,
    IdentityRule,
    Overlap,
    made_sessions_root,
    make_workspace,
    overlaps_of,
    pin_workspace,
    relation_of,
)
from daemon.text import wire_safe

log = logging.getLogger(__name__)

DEFAULT_SESSION_ID = "default"
"""What a caller sends (or an empty id) for its own default session."""
_ID_PREFIX = "ses_"
_DEFAULT_PREFIX = "default-"
_WORKSPACE_PREFIX = "ws_"
_OWN_DEFAULT_PREFIX = "default_"
_HIDDEN_SESSION = "(another principal's session)"
_HIDDEN_WORKSPACE = "(not shown)"


class SessionStore:
    """Finds, opens and closes sessions.

    Args:
        default_workspace: The default session's workspace (created if missing).
        sessions_root: Where fresh workspaces are made (None: only existing directories).
        identities: Who sandboxes run as; None when the daemon has no sandbox.
        state_dir: The daemon's state directory: no session may hold it or lie in it (but
            in the default workspace).
        default_workspace_for: The principals whose default session works in the default
            workspace (None: every principal's); every other principal's works in a folder of
            its own under the sessions root (`own_default_name`, `adopt_default`).
    """

    def __init__(
        self,
        default_workspace: Path,
        sessions_root: Path | None = None,
        identities: IdentityRule | None = None,
        *,
        state_dir: Path | None = None,
        max_per_principal: int = 64,
        max_total: int = 4_096,
        default_workspace_for: frozenset[str] | None = None,
    ) -> None:
        if default_workspace_for is not None and sessions_root is None:
            raise RequestError(
                "default sessions in folders of their own need a sessions root to make them in"
            )
        self._default_workspace_for = default_workspace_for
        self._root = sessions_root
        self._state_dir = None if state_dir is None else Path(os.path.realpath(state_dir))
        self._max_per_principal = max_per_principal
        self._max_total = max_total
        self._identities = identities
        # The operator's own setting, taken as written (a symlink in it is refused, never
        # followed: whoever can write a folder on the way could point it anywhere), then held
        # like any workspace (and shared by the default sessions that work in it).
        written = Path(os.path.normpath(default_workspace.absolute()))
        made = None if os.path.lexists(written) else self._make_folder(written)
        self._default_root = pin_workspace(str(written))
        if made is not None and self._default_root.identity != made:
            self._default_root.close()
            raise RequestError(
                f"the default workspace {written} was replaced while it was being made: "
                "make sure only root and the daemon's account can write its parent folder"
            )
        self._default_identity = self._identity(self._default_root)
        self._default_by_principal = self._principals_share_default()
        self._opening: dict[str, int] = {}
        """Sessions being opened, by principal (see `room_for`)."""
        self._generation = 0
        """Bumped whenever a session opens or closes: what overlaps what is worked out again."""
        self._overlapped: dict[str, tuple[int, bool]] = {}
        self._defaults: dict[str, Session] = {}
        self._private: dict[str, PinnedDirectory] = {}
        """Folders of the daemon's own (private_session): no session may overlap them."""
        self._sessions: dict[str, Session] = {}
        self._fresh_root: Path | None = None
        if sessions_root is not None:
            self._fresh_root = self._sessions_folder()
            folder = PinnedDirectory.pin(self._fresh_root)
            clash = overlaps_of(folder, self._roots())
            folder.close()
            if clash:
                raise RequestError(
                    f"the sessions root {sessions_root} and the default workspace "
                    f"{default_workspace} overlap; choose folders apart from each other"
                )
        if self._state_dir is not None and is_inside(self._default_root.path, self._state_dir):
            self._default_root.close()
            raise RequestError(
                f"the default workspace {default_workspace} holds the state directory "
                f"{state_dir} (its approval key, every session's kept outputs); choose a "
                "workspace apart from it"
            )

    def _sessions_folder(self) -> Path:
        assert self._root is not None
        return made_sessions_root(self._root)

    def _make_folder(self, folder: Path) -> tuple[int, int]:
        """The default workspace, made by tooljail: the sandbox account's to write (see
        `fresh_owner`), and its group's when principals have uids of their own; its (device,
        inode)."""
        folder.parent.mkdir(parents=True, exist_ok=True)
        pin_workspace(str(folder.parent)).close()  # a symlink on the way: refused, with a hint
        shared = self._identities is not None and self._identities.principal_uids is not None
        return make_workspace(folder, self.fresh_owner(), group_writable=shared)

    def _principals_share_default(self) -> bool:
        """Whether each default session over the default workspace runs as its principal's
        own uid, sharing the workspace with the others through the sandbox account's group: when
        principals have uids of their own and the workspace is not a regular user's (whose
        sandboxes run as that user). RequestError when that group cannot write it."""
        rule = self._identities
        if rule is None or rule.principal_uids is None:
            return False
        dedicated = rule.dedicated()
        if self._default_identity != dedicated:
            return False
        root = self._default_root
        if not ((root.gid == dedicated[1] and root.mode & 0o020) or root.mode & 0o002):
            root.close()
            raise RequestError(
                f"the default workspace {root.path} is shared by the default sessions that "
                f"work in it, each running as a uid of its own with group {dedicated[1]} "
                f"(sandbox.user={rule.user!r}), which cannot write it: make it that group's "
                f"to write (chgrp -R {dedicated[1]} {root.path}; chmod -R g+w {root.path}), "
                "or set sandbox.principal_uid_first = 0 to run them all as that account"
            )
        if not root.mode & stat.S_ISVTX:
            _make_sticky(root)
        return True

    def _identity(
        self, root: PinnedDirectory, principal: str | None = None
    ) -> tuple[int, int] | None:
        if self._identities is None:
            return None
        return self._identities.for_workspace(root, principal)

    def _changers(self, root: PinnedDirectory, inside: Iterable[str] = ()) -> HostLook:
        if self._identities is None:
            return HostLook(frozenset(), ())
        return self._identities.host_changers(root, inside)

    def _made_by_sandboxes(self, uid: int) -> bool:
        return self._identities is not None and self._identities.made_by_sandboxes(uid)

    def _roots(self) -> dict[str, PinnedDirectory]:
        roots = {DEFAULT_SESSION_ID: self._default_root}
        roots.update((s.id, s.pinned_root()) for s in self._sessions.values())
        return roots

    def private_session(self, folder: Path, session_id: str) -> Session:
        """A session over a folder of the daemon's own, made afresh and empty, that no caller
        can write or open a session over: where the daemon runs what must see no caller's
        files, such as an MCP server listing its tools (a file there could shadow the server's
        code and make one tenant's tools everyone's). Its sandboxes may read it, never write."""
        written = Path(os.path.normpath(folder.absolute()))
        written.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if written.is_symlink():
            written.unlink()
        elif os.path.lexists(written):
            shutil.rmtree(written)  # whatever an older daemon let in: nothing is kept
        written.mkdir(mode=0o755)
        written.chmod(0o755)  # the umask may have taken bits off
        root = pin_workspace(str(written))
        if root.uid != os.geteuid() or root.mode & 0o022:
            root.close()
            raise RequestError(f"the private folder {written} was replaced while it was made")
        self._private[session_id] = root
        identity = None if self._identities is None else self._identities.dedicated()
        return Session(id=session_id, workspace=root.path, root=root, sandbox_as=identity)

    def default_for(self, principal: str) -> Session:
        """The principal's own default session (made on first use): its grants, mode, read state
        and working directory are nobody else's. NotFound for one in a folder of its own that
        no call made yet (`OwnDefaults.ready`)."""
        session = self._defaults.get(principal)
        if session is None and self.own_default_name(principal) is not None:
            raise NotFound(
                f"the default session of {principal!r} works in a folder of its own, made by "
                "its first call (ListTools or Execute); make one first"
            )
        if session is None:
            sandbox_as = self._default_identity
            if self._default_by_principal:
                assert self._identities is not None
                sandbox_as = self._identities.for_principal(principal)
            session = self._held(
                Session(
                    id=_DEFAULT_PREFIX + secrets.token_hex(8),
                    workspace=self._default_root.path,
                    owner=principal,
                    is_default=True,
                    group_shared=self._default_by_principal,
                ),
                self._default_root,
                sandbox_as,
            )
            self._defaults[principal] = session
        return session

    def own_default_name(self, principal: str) -> str | None:
        """The name of the folder under the sessions root that `principal`'s default session
        works in, while that session is not open yet; None when it is, or when it works in the
        default workspace. The same name after a restart; unlike any fresh workspace's."""
        if (
            self._default_workspace_for is None
            or principal in self._default_workspace_for
            or principal in self._defaults
        ):
            return None
        digest = hashlib.sha256(principal.encode("utf-8", "surrogatepass")).hexdigest()
        return _OWN_DEFAULT_PREFIX + digest[:32]

    def adopt_default(
        self, principal: str, root: PinnedDirectory, *, disk_budget_mb: int, disk_share_mb: int
    ) -> Session:
        """`principal`'s default session over the folder of its own `root` (pinned, made under
        the sessions root for it and checked as its own); `root` is the session's from now on,
        or closed when that session is open already."""
        session = self._defaults.get(principal)
        if session is not None:
            root.close()
            return session
        try:
            identity = None
            if self._identities is not None:
                identity = self._identities.for_fresh(root, principal)
        except RequestError:
            root.close()
            raise
        session = self._held(
            Session(
                id=_DEFAULT_PREFIX + secrets.token_hex(8),
                workspace=root.path,
                owner=principal,
                is_default=True,
                own_folder=True,
                disk_budget_mb=disk_budget_mb,
                disk_share_mb=disk_share_mb,
            ),
            root,
            identity,
        )
        self._defaults[principal] = session
        return session

    def _held(
        self, session: Session, root: PinnedDirectory, identity: tuple[int, int] | None
    ) -> Session:
        """`session`, about to be registered, holding `root` and running its sandboxes as
        `identity`; what overlaps what is worked out again from now on."""
        session.root = root
        session.sandbox_as = identity
        session.host_changers = functools.partial(self._changers, root)
        session.made_by_sandboxes = self._made_by_sandboxes
        session.shared = functools.partial(self.overlapped, session)
        self._generation += 1
        return session

    def get(self, session_id: str, principal: str, *, admin: bool = False) -> Session:
        """The session `principal` names (empty id or "default": its default session);
        NotFound when no such session is open for it (`admin`: for anyone)."""
        if not session_id or session_id == DEFAULT_SESSION_ID:
            session = self.default_for(principal)
        else:
            found = self._sessions.get(session_id) or self._default_by_id(session_id)
            if found is None or not (admin or found.owner == principal):
                raise NotFound(
                    f"unknown session {session_id!r}: it was never opened, or it was closed (also "
                    "after being idle too long); open a new one or use an empty session_id"
                )
            session = found
        session.touch()
        return session

    def _default_by_id(self, session_id: str) -> Session | None:
        if not session_id.startswith(_DEFAULT_PREFIX):
            return None
        return next((s for s in self._defaults.values() if s.id == session_id), None)

    def __len__(self) -> int:
        return len(self._sessions) + len(self._defaults)

    def prepare(self, root: PinnedDirectory, principal: str) -> list[Overlap]:
        """The open sessions overlapping an existing directory `principal` wants a session over
        (pinned: `pin_workspace`), for the policy; another principal's are not named.
        RequestError (`root` closed) for a folder of the daemon's own."""
        if overlaps_of(root, self._private) or self._in_own_folders(root.path):
            root.close()
            raise RequestError(
                f"the workspace {wire_safe(str(root.path))} overlaps a folder of the daemon's "
                "own (its state directory, or where fresh workspaces are made); choose a folder "
                "apart from it"
            )
        return self._named_for(overlaps_of(root, self._roots()), principal)

    def written_overlaps(self, path: Path, principal: str) -> list[Overlap]:
        """The open sessions whose workspace overlaps `path` as written (absolute and normal,
        not looked at on disk), for the policy's first look: refused for an overlap, a session
        over a folder in another's workspace is refused before the daemon looks at the disk
        (attacker round 142 told which files an operator's private folder held from whether
        the answer said it overlaps, does not exist, or is not a directory)."""
        found = []
        for session_id, other in self._roots().items():
            relation = relation_of(other.path, path)
            if relation is not None:
                found.append(Overlap(session_id, str(other.path), relation))
        return self._named_for(found, principal)

    def _named_for(self, overlaps: list[Overlap], principal: str) -> list[Overlap]:
        """`overlaps` as `principal` may see them: another principal's sessions not named."""
        named = []
        for overlap in overlaps:
            owner = (
                self._sessions[overlap.session].owner if overlap.session in self._sessions else ""
            )
            if owner and owner != principal:
                overlap = Overlap(_HIDDEN_SESSION, _HIDDEN_WORKSPACE, overlap.relation)
            named.append(overlap)
        return named

    def _in_own_folders(self, path: Path) -> bool:
        """Whether a session over `path` would hold what only the daemon may: fresh workspaces,
        the sessions of other principals once closed (attacker round 78 opened one left behind
        where the policy's roots held the sessions root), or its state directory (the approval
        key, kept outputs); the default workspace may lie in the state directory and is not
        the daemon's alone."""
        fresh = self._fresh_root
        if fresh is not None and (is_inside(fresh, path) or is_inside(path, fresh)):
            return True
        state = self._state_dir
        if state is None:
            return False
        return is_inside(path, state) or (
            is_inside(state, path) and not is_inside(self._default_root.path, path)
        )

    @contextlib.contextmanager
    def room_for(self, principal: str) -> Iterator[None]:
        """Hold a place for a session of `principal`'s while it opens (Overloaded when it, or
        everyone together, has as many sessions open or opening as allowed): sessions opening
        at once are counted before any of them is open (attacker round 98: 67 under a cap of
        64). The place is the session's once it is open, and given back when opening fails."""
        opening = self._opening.get(principal, 0)
        mine = self.held_by(principal)
        if mine >= self._max_per_principal:
            raise Overloaded(
                f"principal {principal!r} has {mine} sessions open or opening, the most "
                "allowed; close one (CloseSession) or let an idle one expire"
            )
        everyone = sum(self._opening.values()) + len(self._sessions)
        if everyone >= self._max_total:
            raise Overloaded(
                f"the daemon has {everyone} sessions open or opening, the most it allows; retry "
                "later"
            )
        self._opening[principal] = opening + 1
        try:
            yield
        finally:
            left = self._opening[principal] - 1
            if left:
                self._opening[principal] = left
            else:
                del self._opening[principal]

    def held_by(self, principal: str) -> int:
        """`principal`'s sessions open or opening (its default session not counted)."""
        return self._opening.get(principal, 0) + sum(
            1 for s in self._sessions.values() if s.owner == principal
        )

    @staticmethod
    def new_id() -> str:
        """A fresh session id (random: it says nothing about anything)."""
        return _ID_PREFIX + secrets.token_hex(12)

    @staticmethod
    def new_workspace_name() -> str:
        """A fresh workspace folder's name (random, and unrelated to the session's id)."""
        return _WORKSPACE_PREFIX + secrets.token_hex(12)

    def fresh_owner(self, principal: str | None = None) -> tuple[int, int] | None:
        """Who a workspace tooljail makes for `principal` belongs to: the identity its sandboxes
        will run as (`IdentityRule.for_principal`; None: the sandbox account), when the daemon
        is root; that identity's group (uid -1: the daemon keeps the folder), when the daemon is
        a member of it; None (the daemon's own) otherwise, or without a sandbox."""
        if self._identities is None:
            return None
        if principal is None:
            uid, gid = self._identities.dedicated()
        else:
            uid, gid = self._identities.for_principal(principal)
        if os.geteuid() == 0:
            return uid, gid
        return (-1, gid) if gid in os.getgroups() else None

    def open(
        self,
        root: PinnedDirectory,
        idle_ttl_s: float | None,
        *,
        owner: str,
        owns_workspace: bool = False,
        disk_budget_mb: int = 0,
        disk_share_mb: int = 0,
    ) -> Session:
        """A new session over a pinned directory: one the policy allowed, or a fresh one made
        for it (`owns_workspace`), owned by `owner`. The caller has just verified `root`
        (`verify_pinned`): nothing else ran since."""
        session_id = self.new_id()
        try:
            if owns_workspace and self._identities is not None:
                identity: tuple[int, int] | None = self._identities.for_fresh(root, owner)
            else:
                identity = self._identity(root, owner)
        except (RequestError, Overloaded):
            root.close()
            raise
        session = self._held(
            Session(
                id=session_id,
                workspace=root.path,
                owner=owner,
                owns_workspace=owns_workspace,
                idle_ttl_s=idle_ttl_s,
                disk_budget_mb=disk_budget_mb,
                disk_share_mb=disk_share_mb,
            ),
            root,
            identity,
        )
        self._sessions[session_id] = session
        return session

    def closable(
        self, session_id: str, delete_workspace: bool, principal: str, *, admin: bool = False
    ) -> Session:
        """The session, if `principal` may close it this way: never a default session, and only
        a workspace the daemon created for the session may be deleted (RequestError otherwise;
        NotFound for a session that is not the principal's)."""
        if not session_id or session_id == DEFAULT_SESSION_ID:
            raise RequestError("the default session cannot be closed")
        session = self.get(session_id, principal, admin=admin)
        if session.is_default:
            raise RequestError("the default session cannot be closed")
        if session.closed:
            # Its close is under way (the idle sweeper's): a session is closed once.
            raise NotFound(f"session {session_id!r} is being closed already")
        if delete_workspace and not session.owns_workspace:
            raise RequestError(
                "delete_workspace is only allowed for a workspace the daemon created for the "
                "session; an existing directory is never deleted"
            )
        return session

    def close(self, session: Session) -> None:
        """Forget a session `closable` returned; its workspace is left to the caller."""
        self._sessions.pop(session.id, None)
        self._overlapped.pop(session.id, None)
        self._generation += 1
        session.closed = True
        if session.root is not None:
            session.root.close()

    def overlapped(self, session: Session) -> bool:
        """Whether another open session's workspace overlaps `session`'s (the same folder, one
        inside it or around it, every principal's default session included): its commands may
        change files there at any time. Safe from a worker thread: it only reads, copying the
        registries before looking through them."""
        generation = self._generation
        known = self._overlapped.get(session.id)
        if known is not None and known[0] == generation:
            return known[1]
        root = session.root
        others = {
            other.id: other.root
            for other in (*tuple(self._sessions.values()), *tuple(self._defaults.values()))
            if other is not session and other.root is not None
        }
        found = root is not None and bool(overlaps_of(root, others))
        self._overlapped[session.id] = (generation, found)
        return found

    def idle(self, now: float | None = None) -> list[Session]:
        """Opened sessions that have been idle longer than their TTL."""
        moment = time.monotonic() if now is None else now
        return [
            s
            for s in self._sessions.values()
            if s.idle_ttl_s is not None and s.idle_for(moment) > s.idle_ttl_s
        ]


def _make_sticky(root: PinnedDirectory) -> None:
    """The sticky bit on a default workspace principals share that an older version made
    without it (workspaces.SHARED_ROOT), through its descriptor; a warning when this daemon
    may not set it."""
    try:
        fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=root.fd)
        try:
            os.fchmod(fd, stat.S_IMODE(root.mode) | stat.S_ISVTX)
        finally:
            os.close(fd)
    except OSError as exc:
        log.warning(
            "the default workspace %s is shared by principals with uids of their own, but has no "
            "sticky bit, so one principal's sandboxes may rename or remove what another made at "
            "its root (%s): run `chmod +t %s`",
            root.path,
            exc.strerror,
            root.path,
        )
