"""Sessions by id: the default session over the configured workspace, and sessions opened by
callers, each with a workspace of its own (fresh under the sessions root, or an existing directory
the policy allows), its read-state, and an idle TTL after which it is closed."""

from __future__ import annotations

import secrets
import shutil
import time
from pathlib import Path

from daemon.errors import RequestError
from daemon.sessions.session import Session

DEFAULT_SESSION_ID = "default"
_ID_PREFIX = "ses_"


class SessionStore:
    """Finds, opens and closes sessions."""

    def __init__(self, default_workspace: Path, sessions_root: Path | None = None) -> None:
        default_workspace.mkdir(parents=True, exist_ok=True)
        self._root = sessions_root
        self._sessions = {
            DEFAULT_SESSION_ID: Session(
                id=DEFAULT_SESSION_ID, workspace=default_workspace.resolve()
            )
        }

    def get(self, session_id: str) -> Session:
        """The session (empty id: the default); RequestError when no such session is open."""
        session = self._sessions.get(session_id or DEFAULT_SESSION_ID)
        if session is None:
            raise RequestError(
                f"unknown session {session_id!r}: it was never opened, or it was closed (also "
                "after being idle too long); open a new one or use an empty session_id"
            )
        session.touch()
        return session

    def __len__(self) -> int:
        return len(self._sessions)

    def open(self, workspace: Path | None, idle_ttl_s: float | None) -> Session:
        """A new session: over `workspace` (already allowed by the policy) or a fresh directory."""
        session_id = _ID_PREFIX + secrets.token_hex(12)
        if workspace is None:
            if self._root is None:
                raise RequestError("this daemon has no sessions root; name an existing workspace")
            folder = self._root / session_id
            folder.mkdir(parents=True, mode=0o770)
            session = Session(
                id=session_id,
                workspace=folder.resolve(),
                owns_workspace=True,
                idle_ttl_s=idle_ttl_s,
            )
        else:
            if not workspace.is_dir():
                raise RequestError(f"workspace {workspace} is not an existing directory")
            session = Session(id=session_id, workspace=workspace.resolve(), idle_ttl_s=idle_ttl_s)
        self._sessions[session_id] = session
        return session

    def closable(self, session_id: str, delete_workspace: bool) -> Session:
        """The session, if it may be closed this way: never the default session, and only a
        workspace the daemon created for the session may be deleted (RequestError otherwise)."""
        if not session_id or session_id == DEFAULT_SESSION_ID:
            raise RequestError("the default session cannot be closed")
        session = self._sessions.get(session_id)
        if session is None:
            raise RequestError(f"unknown session {session_id!r}")
        if delete_workspace and not session.owns_workspace:
            raise RequestError(
                "delete_workspace is only allowed for a workspace the daemon created for the "
                "session; an existing directory is never deleted"
            )
        return session

    def close(self, session_id: str, delete_workspace: bool) -> tuple[Session, bool]:
        """Forget a session (see `closable`); delete its workspace if asked. Whether the
        workspace is gone."""
        session = self.closable(session_id, delete_workspace)
        del self._sessions[session_id]
        deleted = False
        if delete_workspace:
            shutil.rmtree(session.workspace, ignore_errors=True)
            deleted = not session.workspace.exists()
        return session, deleted

    def idle(self, now: float | None = None) -> list[Session]:
        """Opened sessions that have been idle longer than their TTL."""
        moment = time.monotonic() if now is None else now
        return [
            s
            for s in self._sessions.values()
            if s.idle_ttl_s is not None and s.idle_for(moment) > s.idle_ttl_s
        ]
