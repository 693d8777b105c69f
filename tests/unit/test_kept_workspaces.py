"""Fresh workspaces kept after their sessions closed go `keep_closed_s` later, also across a
restart, and never on a guess."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import stat
import threading
import time
from pathlib import Path

import pytest

from daemon.errors import Overloaded, RequestError
from daemon.host.private_file import replace_json
from daemon.sessions import kept_workspaces
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
    await kept.closed(old, "alice", deleted=False)
    clock.now += DAY / 2
    young = await fresh.create("ws_young", None, "bob")
    await kept.closed(young, "bob", deleted=False)
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
    await kept.closed(folder, "alice", deleted=False)
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
        '{"/abs/..": {"owner": "a", "closed_at": 0}}',  # looked for by its name: none
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
    await kept.closed(folder, "alice", deleted=False)
    folder.rmdir()  # an operator was first
    clock.now += 2
    assert await kept.sweep() == 1 and kept.kept() == {}


async def test_the_registry_is_written_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attacker round 169: every close that kept its workspace rewrote the whole registry (one
    entry per kept workspace, a week's worth) on the event loop every principal is served by:
    29 ms at 10,000 entries, 280 ms at 100,000."""
    fresh, clock = PlainWorkspaces(tmp_path / "sessions"), Clock()
    kept = KeptWorkspaces(tmp_path / "kept.json", fresh, DAY, clock)
    writers: list[str] = []

    def slow_replace(path: Path, value: object) -> None:
        writers.append(threading.current_thread().name)
        time.sleep(0.3)
        replace_json(path, value)

    monkeypatch.setattr(kept_workspaces, "replace_json", slow_replace)
    ticks = 0

    async def ticking() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    ticker = asyncio.create_task(ticking())
    try:
        await kept.closed(await fresh.create("ws", None, "alice"), "alice", deleted=False)
    finally:
        ticker.cancel()
    assert writers and threading.main_thread().name not in writers
    assert ticks >= 10, f"the event loop stood still while the registry was written ({ticks})"
    assert set(json.loads((tmp_path / "kept.json").read_text())) == {str(tmp_path / "sessions/ws")}


async def test_closes_at_once_share_their_writes_and_the_last_state_is_on_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh, clock = PlainWorkspaces(tmp_path / "sessions"), Clock()
    registry = tmp_path / "kept.json"
    kept = KeptWorkspaces(registry, fresh, DAY, clock)
    writes = 0

    def counted(path: Path, value: object) -> None:
        nonlocal writes
        writes += 1
        time.sleep(0.05)
        replace_json(path, value)

    monkeypatch.setattr(kept_workspaces, "replace_json", counted)
    folders = [await fresh.create(f"ws{n}", None, "alice") for n in range(40)]
    await asyncio.gather(*(kept.closed(f, "alice", deleted=False) for f in folders))
    assert set(json.loads(registry.read_text())) == {str(f) for f in folders}
    assert writes <= 3, f"{writes} writes for 40 closes at once"
    assert KeptWorkspaces(registry, fresh, DAY, clock).count("alice") == 40


async def test_a_principal_at_its_kept_limit_is_told_how_to_make_room(tmp_path: Path) -> None:
    """Attacker round 169: OpenSession and CloseSession in a loop kept a workspace each, 57 a
    second, without limit but the principal's disk share (an empty subvolume is a few KiB)."""
    fresh, clock = PlainWorkspaces(tmp_path / "sessions"), Clock()
    kept = KeptWorkspaces(tmp_path / "kept.json", fresh, DAY, clock, max_per_principal=3)
    for n in range(2):
        await kept.closed(await fresh.create(f"ws{n}", None, "alice"), "alice", deleted=False)
    kept.refuse_past_room("alice", sessions=1)  # 2 kept + 1 open: each close can keep its own
    with pytest.raises(Overloaded, match="delete_workspace") as refused:
        kept.refuse_past_room("alice", sessions=2)
    assert "2 workspaces kept" in str(refused.value) and "at most 3" in str(refused.value)
    kept.refuse_past_room("bob", sessions=3)
    clock.now += 2 * DAY
    assert await kept.sweep() == 2
    kept.refuse_past_room("alice", sessions=3)


async def test_with_keep_closed_s_zero_a_folder_an_operator_removed_is_forgotten(
    tmp_path: Path,
) -> None:
    """Kept for ever, the principal's limit would never free up but through the operator."""
    fresh, clock = PlainWorkspaces(tmp_path / "sessions"), Clock()
    kept = KeptWorkspaces(tmp_path / "kept.json", fresh, 0, clock)
    stays, removed = [await fresh.create(name, None, "alice") for name in ("a", "b")]
    await kept.closed(stays, "alice", deleted=False)
    await kept.closed(removed, "alice", deleted=False)
    removed.rmdir()
    assert await kept.sweep() == 1
    assert kept.kept() == {stays: "alice"} and kept.count("alice") == 1


async def test_the_workspace_of_a_session_open_when_the_daemon_stopped_is_kept_from_the_restart(
    tmp_path: Path,
) -> None:
    """Attacker round 170: the fresh workspaces of sessions still open when the daemon stopped
    (a restart, an upgrade) were in no registry: never deleted, and counted against nobody's
    limit after the restart. A fresh workspace is registered before it is made, as open."""
    fresh, clock = PlainWorkspaces(tmp_path / "sessions"), Clock()
    registry = tmp_path / "kept.json"
    kept = KeptWorkspaces(registry, fresh, DAY, clock, max_per_principal=2)
    folder = fresh.folder_for("ws_open")
    await kept.opening(folder, "alice")
    assert await fresh.create("ws_open", None, "alice") == folder
    never_made = fresh.folder_for("ws_never_made")
    await kept.opening(never_made, "alice")
    assert kept.count("alice") == 0, "an open session counts as a session, not as kept"
    assert kept.kept() == {}
    clock.now += 2 * DAY
    assert await kept.sweep() == 0 and folder.exists(), "an open session's workspace went"

    clock.now += DAY
    restarted = KeptWorkspaces(registry, fresh, DAY, clock, max_per_principal=2)
    assert restarted.kept() == {folder: "alice", never_made: "alice"}
    assert restarted.count("alice") == 2
    with pytest.raises(Overloaded):
        restarted.refuse_past_room("alice", sessions=1)
    assert await restarted.sweep() == 1, "the one never made is forgotten"
    clock.now += DAY / 2
    assert await restarted.sweep() == 0 and folder.exists(), "kept from the restart on"
    clock.now += DAY
    assert await restarted.sweep() == 1 and not folder.exists()
    assert json.loads(registry.read_text()) == {}


async def test_a_workspace_whose_deletion_failed_is_kept_and_deleted_later(tmp_path: Path) -> None:
    fresh, clock = PlainWorkspaces(tmp_path / "sessions"), Clock()
    kept = KeptWorkspaces(tmp_path / "kept.json", fresh, DAY, clock)
    folder = fresh.folder_for("ws")
    await kept.opening(folder, "alice")
    await fresh.create("ws", None, "alice")
    await kept.closed(folder, "alice", deleted=False)
    assert kept.kept() == {folder: "alice"} and kept.count("alice") == 1
    other = fresh.folder_for("ws2")
    await kept.opening(other, "alice")
    await kept.closed(other, "alice", deleted=True)
    assert kept.kept() == {folder: "alice"}


class Unmounted(PlainWorkspaces):
    """Fresh workspaces on a filesystem not mounted yet: its folders show once `ready` ran."""

    def __init__(self, root: Path, mounted_at_start: bool = False, mountable: bool = True) -> None:
        super().__init__(root)
        self._stash = root.with_name(root.name + ".unmounted")
        self._mountable = mountable
        self.mounted = mounted_at_start

    def unmount(self) -> None:
        self._root.rename(self._stash)
        self._root.mkdir()
        self.mounted = False

    async def ready(self) -> str:
        if not self._mountable:
            raise OSError("mount: wrong fs type")
        if not self.mounted:
            self._root.rmdir()
            self._stash.rename(self._root)
            self.mounted = True
        return await super().ready()


@pytest.mark.parametrize("mountable", [True, False])
async def test_a_sweep_looks_at_the_mounted_filesystem_never_at_the_empty_mount_point(
    tmp_path: Path, mountable: bool
) -> None:
    """Attacker round 171: started with the workspaces filesystem not mounted (after a reboot),
    the sweep found every registered folder missing on the empty mount point and forgot them
    all: never deleted, counted against nobody. It mounts the filesystem first, and forgets
    nothing when it cannot."""
    fresh, clock = Unmounted(tmp_path / "sessions", mounted_at_start=True), Clock()
    registry = tmp_path / "kept.json"
    kept = KeptWorkspaces(registry, fresh, DAY, clock)
    young, old = [await fresh.create(name, None, "alice") for name in ("young", "old")]
    await kept.closed(old, "alice", deleted=False)
    clock.now += DAY / 2
    await kept.closed(young, "alice", deleted=False)
    fresh.unmount()
    fresh._mountable = mountable
    clock.now += DAY * 0.75
    restarted = KeptWorkspaces(registry, fresh, DAY, clock)
    assert await restarted.sweep() == (1 if mountable else 0)
    assert restarted.count("alice") == (1 if mountable else 2)
    assert set(json.loads(registry.read_text())) == (
        {str(young)} if mountable else {str(young), str(old)}
    )


class Named(PlainWorkspaces):
    """Plain folders that say they are on the filesystem `name` (another kind of workspaces, or
    another image, when it changes)."""

    def __init__(self, root: Path, name: str) -> None:
        super().__init__(root)
        self.name = name

    async def ready(self) -> str:
        await super().ready()
        return self.name


async def test_kept_workspaces_of_another_filesystem_than_the_one_in_view_are_left_alone(
    tmp_path: Path,
) -> None:
    """Attacker round 172: restarted with workspaces.budget_mb changed between 0 and a budget
    (plain folders then, a btrfs filesystem mounted over them now, or the reverse), or with the
    filesystem unmounted under a running daemon, the sweep found every kept workspace missing
    where it looked and forgot them all: never deleted, counted against nobody. Each entry
    names the filesystem it was made on; only that one's sweep forgets or deletes it."""
    clock = Clock()
    registry = tmp_path / "kept.json"
    fresh = Named(tmp_path / "sessions", "btrfs:/state/workspaces.img")
    kept = KeptWorkspaces(registry, fresh, DAY, clock)
    folder = fresh.folder_for("ws")
    await kept.opening(folder, "alice")
    await fresh.create("ws", None, "alice")
    await kept.closed(folder, "alice", deleted=False)
    (tmp_path / "sessions").rename(tmp_path / "hidden")  # out of view: another one in its place
    clock.now += 2 * DAY
    elsewhere = Named(tmp_path / "sessions", "folder:/state/sessions")
    restarted = KeptWorkspaces(registry, elsewhere, DAY, clock)
    assert await restarted.sweep() == 0
    assert restarted.count("alice") == 1 and str(folder) in json.loads(registry.read_text())
    shutil.rmtree(tmp_path / "sessions")
    (tmp_path / "hidden").rename(tmp_path / "sessions")  # the one it was made on, back
    back = KeptWorkspaces(registry, Named(tmp_path / "sessions", fresh.name), DAY, clock)
    assert await back.sweep() == 1 and not folder.exists()
    assert back.count("alice") == 0


async def test_an_image_made_anew_is_the_same_place_and_what_was_on_it_is_forgotten(
    tmp_path: Path,
) -> None:
    """Attacker round 173: a name written on the filesystem changed when its image was made
    anew (as the docs tell operators to do) or the file was removed: the entries of the old one
    were never in view again, counted for ever. The name is the configured image's."""
    clock = Clock()
    registry = tmp_path / "kept.json"
    fresh = Named(tmp_path / "sessions", "btrfs:/state/workspaces.img")
    kept = KeptWorkspaces(registry, fresh, DAY, clock, max_per_principal=2)
    for name in ("a", "b"):
        await kept.opening(fresh.folder_for(name), "alice")
        await kept.closed(await fresh.create(name, None, "alice"), "alice", deleted=False)
    shutil.rmtree(tmp_path / "sessions")  # the image removed, and made anew
    remade = KeptWorkspaces(registry, Named(tmp_path / "sessions", fresh.name), DAY, clock)
    assert await remade.sweep() == 2 and remade.count("alice") == 0


@pytest.mark.parametrize("seen", [True, False])
async def test_an_entry_from_before_filesystems_were_named_is_placed_only_where_it_is_seen(
    tmp_path: Path, seen: bool
) -> None:
    """Attacker round 173: taken for the first place in view, entries of a filesystem
    unmounted at the upgrade were forgotten on the bare folder."""
    fresh, clock = Named(tmp_path / "sessions", "btrfs:/state/workspaces.img"), Clock()
    folder = await fresh.create("ws", None, "alice")
    registry = tmp_path / "kept.json"
    registry.write_text(json.dumps({str(folder): {"owner": "alice", "closed_at": clock.now}}))
    if not seen:
        folder.rmdir()
    kept = KeptWorkspaces(registry, fresh, DAY, clock)
    assert await kept.sweep() == 0
    entry = json.loads(registry.read_text())[str(folder)]
    assert entry.get("filesystem") == (fresh.name if seen else None)
    assert kept.count("alice") == 1
    clock.now += 2 * DAY
    assert await kept.sweep() == (1 if seen else 0)
    assert kept.count("alice") == (0 if seen else 1)


async def test_a_folder_of_plain_workspaces_is_named_by_a_mark_made_in_it_once(
    tmp_path: Path,
) -> None:
    """Attacker round 174: named by its path alone, the folder a bind mount of the same
    filesystem put there had the name of the bare folder beneath it, and a start before the
    bind was back (a reboot) forgot every kept workspace. Attacker round 173: a mark written
    in two steps was read half-made by concurrent opens."""
    one, other = PlainWorkspaces(tmp_path / "a"), PlainWorkspaces(tmp_path / "b")
    names = await asyncio.gather(*(PlainWorkspaces(tmp_path / "a").ready() for _ in range(16)))
    assert set(names) == {await one.ready()} and await one.ready() != await other.ready()
    assert [p.name for p in (tmp_path / "a").iterdir()] == [".tooljail-folder"]
    assert stat.S_IMODE((tmp_path / "a" / ".tooljail-folder").stat().st_mode) == 0o600
    before = await one.ready()
    (tmp_path / "a").rename(tmp_path / "beneath")
    (tmp_path / "a").mkdir()  # another folder at the same path
    assert await one.ready() != before
    (tmp_path / "a" / ".tooljail-folder").write_text("not the daemon's\n")
    with pytest.raises(RequestError, match="not what the daemon wrote"):
        await one.ready()


class UnmountedWhileDeleting(Named):
    """A filesystem unmounted while its first workspace is being deleted: out of view after."""

    def __init__(self, root: Path, name: str, hidden: Path) -> None:
        super().__init__(root, name)
        self.hidden = hidden
        self.deleting = 0

    async def ready(self) -> str:
        if self.deleting:
            raise RequestError("the workspaces filesystem is not mounted")
        return await super().ready()

    async def delete(self, folder: Path, owner: str) -> bool:
        self.deleting += 1
        gone = await super().delete(folder, owner)
        self._root.rename(self.hidden)  # unmounted (lazily) meanwhile
        return gone


async def test_a_filesystem_unmounted_during_a_sweep_leaves_the_rest_registered(
    tmp_path: Path,
) -> None:
    """Attacker round 179: the sweep looked at the filesystem once, then, after a deletion it
    waited for, took every later workspace for gone: a lazy unmount during that deletion made
    the daemon forget workspaces that were still there. It looks again after each wait."""
    clock = Clock()
    image = "btrfs:/state/workspaces.img"
    fresh = UnmountedWhileDeleting(tmp_path / "sessions", image, tmp_path / "hidden")
    kept = KeptWorkspaces(tmp_path / "kept.json", fresh, DAY, clock)
    for name in ("a", "b", "c"):
        folder = await fresh.create(name, None, "alice")
        await kept.closed(folder, "alice", deleted=False)
    clock.now += 2 * DAY
    assert await kept.sweep() == 1
    assert kept.count("alice") == 2
    assert sorted(path.name for path in (tmp_path / "hidden").iterdir() if path.is_dir()) == [
        "b",
        "c",
    ]
