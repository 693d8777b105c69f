"""Opening and closing sessions: policy check for existing directories, cancelling a closed
session's calls, removing its containers, and closing sessions left idle past their TTL."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol, cast

from daemon.errors import PermissionDenied, RequestError, Unavailable
from daemon.host.pinned import PinnedDirectory
from daemon.models import Caller
from daemon.sessions.disk import FreshWorkspaces
from daemon.sessions.kept_workspaces import KeptWorkspaces
from daemon.sessions.session import (
    MODES,
    VERIFY_WAIT_S,
    Mode,
    Session,
    pin_off_loop,
    verify_pinned,
)
from daemon.sessions.store import SessionStore
from daemon.sessions.workspaces import Overlap, pin_workspace, written_path
from daemon.text import wire_safe

log = logging.getLogger(__name__)
_CLOSING: set[asyncio.Future[ClosedSession]] = set()
"""Closings still running after the request that asked for them went away."""

#: Removes a session's containers (warm pool included); returns how many.
SandboxCleanup = Callable[[Session], Awaitable[int]]

#: Whether a session may work in an existing directory (pinned), given the open sessions it
#: overlaps: None when the policy allows it, else the policy's reasons.
WorkspacePolicy = Callable[[Path, list[Overlap], Caller], Awaitable[str | None]]

#: Whether a caller may put a session of `owner`'s in a permission mode (opening it, or
#: changing an open one's): None when the policy allows it, else the policy's reasons.
ModePolicy = Callable[[str, Literal["open", "change"], str, Caller], Awaitable[str | None]]


class RunningCalls(Protocol):
    """The calls in flight, by session (the scheduler)."""

    async def cancel_session(self, session_id: str) -> int:
        """Cancel every running call of a session and wait until each has ended; returns how
        many."""
        ...

    def has_running(self, session_id: str) -> bool:
        """Whether a call of the session is running."""
        ...

    def forget_session(self, session_id: str) -> None:
        """Drop a closed session's scheduling state."""
        ...


def check_mode(mode: str) -> Mode:
    """The mode if it is one of MODES, else RequestError listing them."""
    if mode not in MODES:
        raise RequestError(f"unknown mode {mode!r}; the modes are {', '.join(MODES)}")
    return cast(Mode, mode)


@dataclass(frozen=True)
class ClosedSession:
    """What closing a session did."""

    cancelled_calls: int
    workspace_deleted: bool


class SessionManager:
    """The session lifecycle."""

    def __init__(
        self,
        store: SessionStore,
        workspace_policy: WorkspacePolicy,
        mode_policy: ModePolicy,
        calls: RunningCalls,
        fresh: FreshWorkspaces,
        *,
        default_idle_ttl_s: float,
        max_idle_ttl_s: float = 86_400.0,
        sandbox_cleanup: SandboxCleanup | None = None,
        sweep_interval_s: float = 5.0,
        kept: KeptWorkspaces | None = None,
    ) -> None:
        self._store = store
        self._workspace_policy = workspace_policy
        self._mode_policy = mode_policy
        self._calls = calls
        self._fresh = fresh
        self._default_ttl = default_idle_ttl_s
        self._max_ttl = max_idle_ttl_s
        self._cleanup = sandbox_cleanup
        self._sweep_interval = sweep_interval_s
        self._kept = kept
        self._sweeper: asyncio.Task[None] | None = None

    def get(self, session_id: str, caller: Caller, *, admin: bool = False) -> Session:
        """An open session of the caller's (`admin`: of anyone); NotFound otherwise."""
        return self._store.get(session_id, caller.principal, admin=admin)

    async def set_mode(self, session_id: str, mode: str, caller: Caller, *, admin: bool) -> Session:
        """Change a session's permission mode, if the policy lets the caller."""
        session = self._store.get(session_id, caller.principal, admin=admin)
        checked = check_mode(mode)
        await self._mode_allowed(checked, "change", session.owner, caller)
        session.mode = checked
        return session

    async def _mode_allowed(
        self, mode: Mode, action: Literal["open", "change"], owner: str, caller: Caller
    ) -> None:
        refused = await self._mode_policy(mode, action, owner, caller)
        if refused is not None:
            raise PermissionDenied(f"the policy does not allow permission mode {mode}: {refused}")

    async def open(
        self, workspace: str, idle_ttl_s: int, caller: Caller, mode: str = ""
    ) -> Session:
        """Open a session over a fresh directory, or over an existing one the policy allows.

        Opening always finishes, and a session whose request went away meanwhile (a client
        deadline cancelled it) is closed again at once: nobody would ever learn its id, and it
        would hold a place of its owner's (and a workspace made for it) until it went idle."""
        opening = asyncio.ensure_future(self._open(workspace, idle_ttl_s, caller, mode))
        try:
            return await asyncio.shield(opening)
        except asyncio.CancelledError:
            opening.add_done_callback(self._discard_opened)
            raise

    def _discard_opened(self, opening: asyncio.Future[Session]) -> None:
        if not opening.cancelled() and opening.exception() is None:
            self.discard(opening.result())

    def discard(self, session: Session) -> None:
        """Close, in the background, a session its opener never heard of (with the workspace
        made for it)."""
        self._close_later(session, session.owns_workspace)

    async def _open(self, workspace: str, idle_ttl_s: int, caller: Caller, mode: str) -> Session:
        if idle_ttl_s > self._max_ttl:
            raise RequestError(
                f"idle_ttl_s may be at most {self._max_ttl:g} s on this daemon; ask for less (or "
                "0 for the default)"
            )
        ttl = float(idle_ttl_s) if idle_ttl_s > 0 else self._default_ttl
        mode = check_mode(mode or "default")
        await self._mode_allowed(mode, "open", caller.principal, caller)
        with self._store.room_for(caller.principal):
            if not workspace and self._kept is not None:
                self._kept.refuse_past_room(caller.principal, self._store.held_by(caller.principal))
            session = await self._open_in_room(workspace, ttl, caller)
        session.mode = mode
        return session

    async def _open_fresh(self, ttl: float, principal: str) -> Session:
        """A session over a workspace made for it, in the kept workspaces' registry before it
        is made: one the daemon stops with (or fails to hand over) is kept, then deleted."""
        name = self._store.new_workspace_name()
        folder = self._fresh.folder_for(name)
        if self._kept is not None:
            try:
                await self._kept.opening(folder, principal)
            except OSError as exc:
                log.error("cannot write the kept workspaces' registry: %s", exc)
                raise Unavailable(
                    "the daemon cannot record the workspace it would make for the session (its "
                    "state directory cannot be written), so none was made; retry later, or open "
                    "the session over an existing directory"
                ) from exc
        try:
            made = await self._fresh.create(name, self._store.fresh_owner(principal), principal)
            fresh = await pin_off_loop(lambda: PinnedDirectory.pin(made), principal)
            return self._store.open(
                fresh,
                ttl,
                owner=principal,
                owns_workspace=True,
                disk_budget_mb=self._fresh.budget_mb,
                disk_share_mb=self._fresh.share_mb,
            )
        except BaseException:
            if self._kept is not None:
                await self._kept.closed(folder, principal, deleted=not os.path.lexists(folder))
            raise

    async def _open_in_room(self, workspace: str, ttl: float, caller: Caller) -> Session:
        if not workspace:
            return await self._open_fresh(ttl, caller.principal)
        # The policy sees the path as written first, with the open sessions it overlaps as
        # written: one it refuses is never looked at on disk (the daemon may be root; nobody may
        # learn through it what exists where).
        written = written_path(workspace)
        overlaps = self._store.written_overlaps(written, caller.principal)
        refused = await self._workspace_policy(written, overlaps, caller)
        if refused is not None:
            raise RequestError(f"the policy does not allow a session over {workspace}: {refused}")
        # Pinning asks the filesystem, which its owner may have made one that never answers.
        try:
            root = await pin_off_loop(
                lambda: pin_workspace(workspace, tell_real_path=False), caller.principal
            )
        except TimeoutError as exc:
            raise RequestError(
                f"workspace {wire_safe(workspace)} could not be looked at within "
                f"{VERIFY_WAIT_S:g} s: its filesystem hangs, or every thread this principal may "
                "use waits on one that does; nothing was opened"
            ) from exc
        try:
            overlaps = self._store.prepare(root, caller.principal)
            refused = await self._workspace_policy(root.path, overlaps, caller)
            if refused is not None:
                raise RequestError(
                    f"the policy does not allow a session over {root.path}: {refused}"
                )
            await verify_pinned(root, caller.principal)
        except (OSError, TimeoutError) as exc:
            root.close()
            raise RequestError(
                f"workspace {root.path} changed while the session was being opened, or its "
                "filesystem does not answer; nothing was opened, retry"
            ) from exc
        except BaseException:
            root.close()
            raise
        return self._store.open(root, ttl, owner=caller.principal)

    async def close(
        self, session_id: str, delete_workspace: bool, caller: Caller, *, admin: bool = False
    ) -> ClosedSession:
        """Close a session of the caller's (`admin`: of anyone's): cancel its calls, remove its
        containers, forget its state."""
        session = self._store.closable(session_id, delete_workspace, caller.principal, admin=admin)
        # Closing always finishes, whatever happens to the request that asked for it (a client
        # deadline cancelling it halfway left sessions half closed and their containers running).
        return await asyncio.shield(self._close_later(session, delete_workspace))

    async def _close(self, session: Session, delete_workspace: bool) -> ClosedSession:
        """Close `session`; run it shielded (see `close`): every step must happen, once."""
        if session.closed:
            return ClosedSession(cancelled_calls=0, workspace_deleted=False)
        # Closed before its things are cleaned up: what still runs for it (a kept output being
        # written, a queued call) sees that and keeps nothing new.
        session.closed = True
        # Waited for: what a cancelled call's command does until its container is gone must not
        # land after the close answered, nor in a workspace whose budget is lifted to delete it
        # (attacker round 98).
        cancelled = await self._calls.cancel_session(session.id)
        if self._cleanup is not None:
            try:
                await self._cleanup(session)
            except Exception:  # teardown logs and carries on
                log.exception("removing the containers of session %s failed", session.id)
        self._store.close(session)
        deleted = False
        if delete_workspace:
            try:
                deleted = await self._fresh.delete(session.workspace, session.owner)
            except RequestError:
                log.exception("deleting the workspace of session %s failed", session.id)
        if session.owns_workspace and self._kept is not None:
            try:
                await self._kept.closed(session.workspace, session.owner, deleted=deleted)
            except OSError:  # the close goes on: the workspace stays until an operator acts
                log.exception("recording the kept workspace of session %s failed", session.id)
        self._calls.forget_session(session.id)
        return ClosedSession(cancelled_calls=cancelled, workspace_deleted=deleted)

    def start(self) -> None:
        """Start closing idle sessions in the background."""
        self._sweeper = asyncio.create_task(self._sweep(), name="session-sweeper")

    async def stop(self) -> None:
        """Stop the idle sweeper."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None

    async def _sweep(self) -> None:
        # Each close, and each pruning of kept workspaces, goes on by itself: one that waits (on
        # a container the engine cannot kill yet, on a hung filesystem) holds no other session's
        # expiry (attacker round 99's lead).
        pruning: asyncio.Task[None] | None = None
        while True:
            await asyncio.sleep(self._sweep_interval)
            if self._kept is not None and (pruning is None or pruning.done()):
                pruning = asyncio.create_task(self._prune(self._kept), name="kept-workspaces")
            for session in self._store.idle():
                if session.closed:
                    continue  # its close is under way
                if self._calls.has_running(session.id):
                    session.touch()
                    continue
                log.info("closing session %s after %.0f s idle", session.id, session.idle_ttl_s)
                self._close_later(session, delete_workspace=False)

    def _close_later(
        self, session: Session, delete_workspace: bool
    ) -> asyncio.Future[ClosedSession]:
        """Close `session` in a task of its own, held until it ends."""
        closing = asyncio.ensure_future(self._close(session, delete_workspace))
        _CLOSING.add(closing)
        closing.add_done_callback(_CLOSING.discard)
        return closing

    @staticmethod
    async def _prune(kept: KeptWorkspaces) -> None:
        try:
            await kept.sweep()
        except Exception:  # tried again at the next sweep
            log.exception("deleting kept workspaces failed")
