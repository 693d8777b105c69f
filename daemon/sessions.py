"""Sessions by id. For now one default session over the configured workspace."""

from __future__ import annotations

from pathlib import Path

from daemon.errors import RequestError
from daemon.session import Session

DEFAULT_SESSION_ID = "default"


class SessionStore:
    """Finds the session a request names (empty means the default session)."""

    def __init__(self, default_workspace: Path) -> None:
        default_workspace.mkdir(parents=True, exist_ok=True)
        self._sessions = {
            DEFAULT_SESSION_ID: Session(
                id=DEFAULT_SESSION_ID, workspace=default_workspace.resolve()
            )
        }

    def get(self, session_id: str) -> Session:
        """The session; RequestError when no such session exists."""
        session = self._sessions.get(session_id or DEFAULT_SESSION_ID)
        if session is None:
            raise RequestError(
                f"unknown session {session_id!r}; use an empty session_id for the default session"
            )
        return session

    @property
    def default(self) -> Session:
        """The default session."""
        return self._sessions[DEFAULT_SESSION_ID]
