"""Fresh workspaces kept after their sessions closed go `keep_closed_s` later, also across a
restart, and never on a guess."""

from __future__ import annotations

import json
import logging
import stat
from pathlib import Path

import pytest

from daemon.sessions.disk import PlainWorkspaces
from daemon.sessions.kept_workspaces import KeptWorkspaces

DAY = 86_400.0


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_a_kept_workspace_goes_once_kept_long_enough_also_after_a_restart(
    tmp_path: Path,
) -> None:
    """Attacker round 98: kept workspaces stayed for ever, and nobody could delete them (nobody
    may open a session over one); a principal whose share they fill would be stuck."""
    fresh, clock = PlainWorkspaces(tmp_path / "sessions"), Clock()
    registry = tmp_path / "state" / "kept-workspaces.json"
    kept = KeptWorkspaces(registry, fresh, DAY, clock)
    old = await fresh.create("ws_old", None, "alice")
    (old / "result.txt").write_text("alice's\n")
    kept.record(old, "alice")
    clock.now += DAY / 2
    young = await fresh.create("ws_young", None, "bob")
    kept.record(young, "bob")
    assert stat.S_IMODE(registry.stat().st_mode) == 0o600
    assert await kept.sweep() == 0 and old.exists()

    clock.now += DAY / 2
    restarted = KeptWorkspaces(registry, fresh, DAY, clock)
    assert restarted.kept() == {old: "alice", young: "bob"}
    assert await restarted.sweep() == 1
    assert not old.exists() and young.exists()
    assert set(json.loads(registry.read_text())) == {str(young)}


async def test_keep_closed_s_zero_keeps_them(tmp_path: Path) -> None:
    fresh, clock = PlainWorkspaces(tmp_path / "sessions"), Clock()
    kept = KeptWorkspaces(tmp_path / "kept.json", fresh, 0, clock)
    folder = await fresh.create("ws", None, "alice")
    kept.record(folder, "alice")
    clock.now += 1000 * DAY
    assert await kept.sweep() == 0 and folder.exists()


@pytest.mark.parametrize(
    "written",
    [
        "not json",
        "[1, 2]",
        '{"relative/path": {"owner": "a", "closed_at": 0}}',
        '{"/abs": {"owner": 7, "closed_at": 0}}',
        '{"/abs": {"owner": "a", "closed_at": "0"}}',
        '{"/abs": {"owner": "a", "closed_at": NaN}}',
    ],
)
async def test_a_registry_that_is_not_the_daemons_deletes_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, written: str
) -> None:
    fresh, clock = PlainWorkspaces(tmp_path / "sessions"), Clock()
    folder = await fresh.create("ws", None, "alice")
    registry = tmp_path / "kept.json"
    registry.write_text(written.replace("/abs", str(folder)))
    with caplog.at_level(logging.ERROR):
        kept = KeptWorkspaces(registry, fresh, 1.0, clock)
    clock.now += DAY
    assert kept.kept() == {} and await kept.sweep() == 0 and folder.exists()
    assert "no kept workspace will be deleted" in caplog.text


async def test_a_kept_workspace_removed_by_someone_else_is_forgotten(tmp_path: Path) -> None:
    fresh, clock = PlainWorkspaces(tmp_path / "sessions"), Clock()
    kept = KeptWorkspaces(tmp_path / "kept.json", fresh, 1.0, clock)
    folder = await fresh.create("ws", None, "alice")
    kept.record(folder, "alice")
    folder.rmdir()  # an operator was first
    clock.now += 2
    assert await kept.sweep() == 1 and kept.kept() == {}
