"""OpenSession's first policy question sees the open sessions a written path overlaps, so a
refusal for an overlap comes before the daemon (often root) looks at the disk: attacker round
142 told which files an operator's private folder held from whether the answer said "overlaps",
"does not exist" or "not a directory"."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.errors import RequestError
from daemon.models import Caller
from daemon.sessions.disk import PlainWorkspaces
from daemon.sessions.manager import SessionManager
from daemon.sessions.store import SessionStore
from daemon.sessions.workspaces import Overlap


async def _no_overlap(path: Path, overlaps: list[Overlap], caller: Caller) -> str | None:
    return "it overlaps another session's workspace" if overlaps else None


async def _allowed(*_: object) -> str | None:
    return None


class _NoCalls:
    async def cancel_session(self, session_id: str) -> int:
        return 0

    def has_running(self, session_id: str) -> bool:
        return False

    def forget_session(self, session_id: str) -> None:
        pass


async def test_a_refused_overlap_tells_nothing_of_what_exists_there(tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "default", tmp_path / "sessions")
    store.default_for("local")
    private = tmp_path / "default" / "private"
    (private / "plans-2027").mkdir(parents=True)
    (private / "passwords.txt").write_text("x")
    private.chmod(0o700)
    manager = SessionManager(
        store,
        _no_overlap,
        _allowed,
        _NoCalls(),
        PlainWorkspaces(tmp_path / "sessions"),
        default_idle_ttl_s=600,
    )
    answers = []
    for name in ("plans-2027", "plans-2028", "passwords.txt"):
        with pytest.raises(RequestError) as refused:
            await manager.open(str(private / name), 0, Caller(principal="mallory"))
        answers.append(str(refused.value).replace(name, "NAME"))
    assert len(set(answers)) == 1, answers
    assert "overlaps another session's workspace" in answers[0]
