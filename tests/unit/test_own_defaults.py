"""Default sessions in folders of their own: which principals get one, where it is made, that
it is made once and found again, and what is refused instead of taken as a tenant's."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from daemon.errors import NotFound, RequestError
from daemon.sessions.disk import PlainWorkspaces
from daemon.sessions.own_defaults import OwnDefaults
from daemon.sessions.store import SessionStore

OPERATORS = frozenset({"local"})


def _defaults(tmp_path: Path) -> tuple[SessionStore, OwnDefaults]:
    store = SessionStore(
        tmp_path / "default", tmp_path / "sessions", default_workspace_for=OPERATORS
    )
    return store, OwnDefaults(store, PlainWorkspaces(tmp_path / "sessions"))


async def test_a_tenants_default_session_works_in_a_folder_of_its_own(tmp_path: Path) -> None:
    store, defaults = _defaults(tmp_path)
    await defaults.ready("", "local")
    local = store.get("", "local")
    assert local.workspace == (tmp_path / "default").resolve() and not local.own_folder
    with pytest.raises(NotFound, match="made by its first call"):
        store.get("default", "alice")
    await defaults.ready("default", "alice")
    await defaults.ready("", "bob")
    alice, bob = store.get("", "alice"), store.get("default", "bob")
    sessions = (tmp_path / "sessions").resolve()
    assert alice.workspace.parent == sessions and bob.workspace.parent == sessions
    assert alice.workspace != bob.workspace
    assert alice.is_default and alice.own_folder and alice.owner == "alice"
    assert alice.workspace.name.startswith("default_")
    assert not alice.workspace.name.startswith(store.new_workspace_name()[:3])
    await defaults.ready("", "alice")
    assert store.get("", "alice") is alice


async def test_a_named_session_makes_no_default_folder(tmp_path: Path) -> None:
    store, defaults = _defaults(tmp_path)
    await defaults.ready("ses_0123", "alice")
    assert not (tmp_path / "sessions").exists() or not any((tmp_path / "sessions").iterdir())
    assert store.own_default_name("alice") is not None


async def test_first_calls_at_once_make_one_folder_and_one_session(tmp_path: Path) -> None:
    store, defaults = _defaults(tmp_path)
    await asyncio.gather(*(defaults.ready("", "alice") for _ in range(8)))
    made = list((tmp_path / "sessions").iterdir())
    assert len(made) == 1
    assert store.get("", "alice").workspace == made[0].resolve()
    assert len(store) == 1


async def test_the_folder_and_its_files_are_found_again_after_a_restart(tmp_path: Path) -> None:
    store, defaults = _defaults(tmp_path)
    await defaults.ready("", "alice")
    before = store.get("", "alice")
    (before.workspace / "notes").write_text("kept\n")
    again, defaults_again = _defaults(tmp_path)
    await defaults_again.ready("", "alice")
    after = again.get("", "alice")
    assert after.workspace == before.workspace and after.id != before.id
    assert (after.workspace / "notes").read_text() == "kept\n"


async def test_what_is_not_the_daemons_own_making_is_refused(tmp_path: Path) -> None:
    store, defaults = _defaults(tmp_path)
    sessions = tmp_path / "sessions"  # made by the store, as the daemon's own
    name = store.own_default_name("alice")
    assert name is not None
    (sessions / name).mkdir()
    os.chown(sessions / name, 4321, 4321)
    with pytest.raises(RequestError, match="belongs to uid 4321"):
        await defaults.ready("", "alice")
    (sessions / name).rmdir()
    (sessions / name).symlink_to(tmp_path / "default", target_is_directory=True)
    with pytest.raises(RequestError, match="cannot be opened"):
        await defaults.ready("", "alice")
    with pytest.raises(NotFound):
        store.get("", "alice")


def test_everyone_shares_the_default_workspace_when_the_operator_says_so(
    tmp_path: Path,
) -> None:
    store = SessionStore(tmp_path / "default", tmp_path / "sessions")
    assert store.own_default_name("alice") is None
    assert store.get("", "alice").workspace == store.get("", "bob").workspace
    with pytest.raises(RequestError, match="sessions root"):
        SessionStore(tmp_path / "default", None, default_workspace_for=OPERATORS)


class _SlowWorkspaces(PlainWorkspaces):
    """Makes a workspace in two steps, as the btrfs one does (the subvolume, then its hand-over),
    with a wait between them."""

    async def create(self, name: str, owner: tuple[int, int] | None, principal: str) -> Path:
        folder = Path(os.path.realpath(self._root)) / name
        folder.mkdir(mode=0o755)
        await asyncio.sleep(0.2)
        if owner is not None:
            os.chown(folder, *owner)
        return folder


async def test_a_first_call_given_up_on_still_makes_the_folder_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attacker round 142: a first call whose deadline ran out while its folder was made left
    it half made (root's, never handed over), and every later call of the tenant was refused,
    after a restart too."""
    store = SessionStore(
        tmp_path / "default", tmp_path / "sessions", default_workspace_for=OPERATORS
    )
    monkeypatch.setattr(store, "fresh_owner", lambda principal=None: (4321, 4321))
    defaults = OwnDefaults(store, _SlowWorkspaces(tmp_path / "sessions"))
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await defaults.ready("", "alice")
    await defaults.ready("", "alice")
    session = store.get("", "alice")
    assert session.workspace.stat().st_uid == 4321


async def test_a_folder_left_half_made_by_a_stopped_daemon_is_made_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Round 142: the daemon's own empty folder under the name, never handed over (a stop in
    the middle of its making), is made again rather than refused for good; one with anything
    in it is still refused."""
    store, defaults = _defaults(tmp_path)
    monkeypatch.setattr(store, "fresh_owner", lambda principal=None: (4321, 4321))
    name = store.own_default_name("alice")
    assert name is not None
    (tmp_path / "sessions" / name).mkdir(mode=0o755)
    await defaults.ready("", "alice")
    assert store.get("", "alice").workspace.stat().st_uid == 4321
    bobs = store.own_default_name("bob")
    assert bobs is not None
    (tmp_path / "sessions" / bobs).mkdir(mode=0o755)
    (tmp_path / "sessions" / bobs / "something").write_text("?")
    with pytest.raises(RequestError, match="belongs to uid 0"):
        await defaults.ready("", "bob")
