"""The workspaces' set-up turns (sandbox/set_up_gate.py) over a fake engine: which containers are
frozen while a pinned container is made, what waits, and what a failure leaves."""

from __future__ import annotations

import asyncio
import os
import struct
from pathlib import Path
from typing import Any

import docker.errors
import pytest
import requests

from sandbox import set_up_gate
from sandbox.backend import SET_UP_CHANGED, PathPin, SandboxSpec, SandboxStartError, WayFolder
from sandbox.pin_check import moved_pin
from sandbox.set_up_gate import FreezeOutcome, SetUpGate, Unfreezable, related


class Engine:
    """Pause and unpause, recorded; `states` says what a pause finds."""

    def __init__(self) -> None:
        self.frozen: set[str] = set()
        self.log: list[tuple[str, str]] = []
        self.states: dict[str, FreezeOutcome | Exception] = {}
        self.removed: set[str] = set()
        self.stopped: list[str] = []
        self.unstoppable: set[str] = set()

    async def freeze(self, container_id: str) -> FreezeOutcome:
        await asyncio.sleep(0)
        self.log.append(("freeze", container_id))
        state = self.states.get(container_id, "frozen")
        if isinstance(state, Exception):
            raise state
        if state == "frozen":
            assert container_id not in self.frozen, "frozen twice"
            self.frozen.add(container_id)
        return state

    async def thaw(self, container_id: str) -> None:
        await asyncio.sleep(0)
        self.log.append(("thaw", container_id))
        self.frozen.discard(container_id)

    async def gone(self, container_id: str) -> bool:
        await asyncio.sleep(0)
        return container_id in self.removed

    async def stop(self, container_id: str) -> bool:
        await asyncio.sleep(0)
        self.stopped.append(container_id)
        return container_id not in self.unstoppable


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_workspaces_are_related_when_one_holds_the_other() -> None:
    assert related("/w/a", "/w/a")
    assert related("/w", "/w/a/b")
    assert related("/w/a/b", "/w")
    assert related("/", "/w")
    assert not related("/w/a", "/w/ab")
    assert not related("/w/a", "/w/b")


async def test_a_set_up_freezes_the_acting_containers_of_related_workspaces_only() -> None:
    engine = Engine()
    gate = SetUpGate(engine)
    await gate.deliver("same", "/w/a")
    await gate.deliver("enclosing", "/w")
    await gate.deliver("inside", "/w/a/sub")
    await gate.deliver("other", "/w/b")
    async with gate.setting_up("/w/a"):
        assert engine.frozen == {"same", "enclosing", "inside"}
    assert engine.frozen == set()
    assert sorted(cid for verb, cid in engine.log if verb == "thaw") == [
        "enclosing",
        "inside",
        "same",
    ]


async def test_a_container_that_never_had_a_request_is_not_frozen() -> None:
    engine = Engine()
    gate = SetUpGate(engine)
    async with gate.setting_up("/w/a"):
        assert engine.log == []


async def test_a_request_waits_for_a_related_set_up_and_not_for_another() -> None:
    engine = Engine()
    gate = SetUpGate(engine)
    release = asyncio.Event()

    async def set_up() -> None:
        async with gate.setting_up("/w/a"):
            await release.wait()

    task = asyncio.create_task(set_up())
    await asyncio.sleep(0.01)
    related_request = asyncio.create_task(gate.deliver("c1", "/w/a/x"))
    await asyncio.wait_for(gate.deliver("c2", "/w/b"), 1)  # unrelated: at once
    await asyncio.sleep(0.01)
    assert not related_request.done()
    assert "c1" not in gate.acting()
    release.set()
    await asyncio.wait_for(related_request, 1)
    await task
    assert gate.acting() == {"c1": "/w/a/x", "c2": "/w/b"}


async def test_set_ups_of_related_workspaces_take_turns() -> None:
    engine = Engine()
    gate = SetUpGate(engine)
    inside: list[str] = []

    async def set_up(workspace: str) -> None:
        async with gate.setting_up(workspace):
            inside.append(workspace)
            assert len(inside) == 1, inside
            await asyncio.sleep(0.01)
            inside.remove(workspace)

    await asyncio.gather(set_up("/w"), set_up("/w/a"), set_up("/w/a"))


async def test_a_container_that_cannot_be_frozen_is_stopped_and_the_set_up_goes_on() -> None:
    """Attacker round 122: processes held in long system calls (200 MB writes, one after the
    other) kept the freezer from ever reaching FROZEN, and every set-up of the shared workspace
    was refused for as long as the command ran. The container that cannot be held still is
    stopped instead, outside the turn (the others are thawed meanwhile)."""
    engine = Engine()
    gate = SetUpGate(engine)
    await gate.deliver("ok", "/w")
    await gate.deliver("stuck", "/w")
    engine.states["stuck"] = Unfreezable(SET_UP_CHANGED)
    async with gate.setting_up("/w"):
        assert engine.frozen == {"ok"}
        assert engine.stopped == ["stuck"]
    assert engine.frozen == set()
    assert gate.acting() == {"ok": "/w"}


async def test_a_container_that_can_be_neither_frozen_nor_stopped_refuses_the_set_up() -> None:
    engine = Engine()
    gate = SetUpGate(engine)
    await gate.deliver("ok", "/w")
    await gate.deliver("stuck", "/w")
    engine.states["stuck"] = Unfreezable(SET_UP_CHANGED)
    engine.unstoppable.add("stuck")
    entered = False
    with pytest.raises(SandboxStartError):
        async with gate.setting_up("/w"):
            entered = True
    assert not entered
    assert engine.frozen == set()
    await asyncio.wait_for(gate.deliver("next", "/w"), 1)  # the turn is over


async def test_an_engine_that_fails_to_answer_stops_nothing_and_refuses_the_set_up() -> None:
    """Round 123's lead: a slow engine (a time-out, a lost connection) is not a container that
    cannot be held still; stopping every acting container for it would be the engine's fault
    turned on the tenants."""
    engine = Engine()
    gate = SetUpGate(engine)
    await gate.deliver("c1", "/w")
    engine.states["c1"] = SandboxStartError(SET_UP_CHANGED)
    with pytest.raises(SandboxStartError):
        async with gate.setting_up("/w"):
            pass
    assert engine.stopped == []
    assert gate.acting() == {"c1": "/w"}


async def test_a_removed_container_is_forgotten_and_the_set_up_goes_on() -> None:
    engine = Engine()
    gate = SetUpGate(engine)
    await gate.deliver("gone", "/w")
    engine.states["gone"] = "gone"
    async with gate.setting_up("/w"):
        pass
    assert gate.acting() == {}


async def test_a_stopped_container_is_waited_for_until_the_engine_removed_it() -> None:
    """A stopped container's processes stuck in the kernel may still finish a rename (attacker
    round 94), and the engine no longer freezes it: the set-up waits until the engine has it
    gone, whether or not the daemon's own removal said so (round 120: the engine's automatic
    removal made the daemon's say "not known gone", and the set-up waited 30 s for nothing)."""
    engine = Engine()
    gate = SetUpGate(engine)
    await gate.deliver("stopping", "/w")
    engine.states["stopping"] = "stopped"
    entered = asyncio.Event()

    async def set_up() -> None:
        async with gate.setting_up("/w"):
            entered.set()

    task = asyncio.create_task(set_up())
    await asyncio.sleep(0.1)
    assert not entered.is_set()
    engine.removed.add("stopping")  # never forgotten by the daemon
    await asyncio.wait_for(task, 5)
    assert gate.acting() == {}


async def test_requests_do_not_wait_while_a_set_up_waits_for_a_stopped_container() -> None:
    """Round 120: while a set-up waited for a stopped container, every request of the shared
    workspace waited with it, 30 s at a time."""
    engine = Engine()
    gate = SetUpGate(engine)
    await gate.deliver("stopping", "/w")
    engine.states["stopping"] = "stopped"
    task = asyncio.create_task(_enter(gate, "/w"))
    await asyncio.sleep(0.1)
    await asyncio.wait_for(gate.deliver("another", "/w"), 1)
    engine.removed.add("stopping")
    await asyncio.wait_for(task, 5)


async def test_a_stopped_container_never_removed_refuses_the_set_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(set_up_gate, "STOPPING_WAIT_S", 0.1)
    engine = Engine()
    gate = SetUpGate(engine)
    await gate.deliver("stuck", "/w")
    engine.states["stuck"] = "stopped"
    with pytest.raises(SandboxStartError, match="could not be set up"):
        async with gate.setting_up("/w"):
            pass
    assert engine.frozen == set()


async def test_a_container_frozen_for_a_while_runs_as_long_before_it_is_frozen_again() -> None:
    """Another tenant's set-ups, one after the other, must not keep a command frozen."""
    engine = Engine()
    clock = Clock()
    gate = SetUpGate(engine, clock=clock)
    await gate.deliver("victim", "/w")
    async with gate.setting_up("/w"):
        clock.now += 0.5  # frozen for half a second
    second = asyncio.create_task(_enter(gate, "/w"))
    await asyncio.sleep(0.1)
    assert not second.done()  # waits for the victim's half second of running
    clock.now += 0.5
    await asyncio.wait_for(second, 2)
    assert engine.log.count(("freeze", "victim")) == 2


async def test_a_container_of_two_unrelated_set_ups_is_frozen_once_and_thawed_after_both() -> None:
    engine = Engine()
    gate = SetUpGate(engine)
    await gate.deliver("home", "/home/alice")
    first_in, release_first = asyncio.Event(), asyncio.Event()

    async def first() -> None:
        async with gate.setting_up("/home/alice/p1"):
            first_in.set()
            await release_first.wait()

    task = asyncio.create_task(first())
    await first_in.wait()
    async with gate.setting_up("/home/alice/p2"):
        assert engine.frozen == {"home"}
    assert engine.frozen == {"home"}  # the first still holds it
    release_first.set()
    await task
    assert engine.frozen == set()
    assert engine.log == [("freeze", "home"), ("thaw", "home")]


async def _enter(gate: SetUpGate, workspace: str) -> None:
    async with gate.setting_up(workspace):
        pass


def _pinned(workspace: Path, name: str) -> PathPin:
    info = (workspace / name).stat()
    return PathPin(path=str(workspace / name), identity=(info.st_dev, info.st_ino), read_only=True)


def _spec(workspace: Path, *pins: PathPin) -> SandboxSpec:
    info = workspace.stat()
    return SandboxSpec(workspace=workspace, workspace_id=(info.st_dev, info.st_ino), git_pins=pins)


def test_pins_still_in_place_pass(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    assert moved_pin(_spec(tmp_path, _pinned(tmp_path, ".git"))) == ""


def test_a_pin_replaced_by_a_link_to_itself_is_moved(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / ".git").mkdir()
    pin = _pinned(tmp_path, ".git")
    os.rename(tmp_path / ".git", tmp_path / "real" / ".git")
    (tmp_path / ".git").symlink_to(tmp_path / "real" / ".git")  # the very same folder, linked
    assert "symbolic link" in moved_pin(_spec(tmp_path, pin))


def test_a_link_on_the_way_to_a_pin_is_refused(tmp_path: Path) -> None:
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    pin = _pinned(tmp_path, "repo/.git")
    os.rename(tmp_path / "repo", tmp_path / "moved")
    (tmp_path / "repo").symlink_to(tmp_path / "moved")
    assert "symbolic link" in moved_pin(_spec(tmp_path, pin))


def test_another_folder_at_a_pin_is_moved(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    pin = _pinned(tmp_path, ".git")
    os.rename(tmp_path / ".git", tmp_path / "old")
    (tmp_path / ".git").mkdir()
    assert "another object" in moved_pin(_spec(tmp_path, pin))


def test_a_replaced_workspace_is_moved(tmp_path: Path) -> None:
    workspace = tmp_path / "w"
    workspace.mkdir()
    spec = _spec(workspace)
    os.rename(workspace, tmp_path / "old")
    workspace.mkdir()
    assert "another object" in moved_pin(spec)


def _way(*folders: Path) -> tuple[WayFolder, ...]:
    looks = [(folder, folder.lstat()) for folder in folders]
    return tuple(
        WayFolder(path=str(f), uid=i.st_uid, gid=i.st_gid, mode=i.st_mode) for f, i in looks
    )


def test_a_folder_on_the_way_opened_to_everyone_after_the_judgement_is_moved(
    tmp_path: Path,
) -> None:
    """Who could race a container's mounts from the host was judged on these folders: a
    sandbox that made one world-writable after that (before its turn) must not get the
    container made as judged."""
    (tmp_path / "sub" / ".git").mkdir(parents=True)
    spec = _spec(tmp_path, _pinned(tmp_path, "sub/.git")).model_copy(
        update={"host_way": _way(tmp_path, tmp_path / "sub", tmp_path / "sub" / ".git")}
    )
    assert moved_pin(spec) == ""
    (tmp_path / "sub").chmod(0o777)
    assert "changed owner, mode" in moved_pin(spec)


def test_a_folder_on_the_way_given_away_or_gone_is_moved(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    spec = _spec(tmp_path).model_copy(update={"host_way": _way(tmp_path, tmp_path / "sub")})
    os.chown(tmp_path / "sub", 4321, 4321)
    assert "changed owner, mode" in moved_pin(spec)
    os.rename(tmp_path / "sub", tmp_path / "gone")
    assert "can no longer be looked at" in moved_pin(spec)
    (tmp_path / "sub").symlink_to(tmp_path / "gone")
    assert "changed owner, mode" in moved_pin(spec)


class _PinnedEngine:
    """An engine that must never be asked to make a container."""

    def __init__(self) -> None:
        self.created = 0

    def create_host_config(self, **kwargs: Any) -> dict[str, Any]:
        return kwargs

    def create_container(self, **kwargs: Any) -> dict[str, Any]:
        self.created += 1
        raise AssertionError("asked to make a container over a moved pin")


async def test_the_engine_is_never_asked_for_a_container_over_a_moved_pin(
    backend_over: Any, tmp_path: Path
) -> None:
    (tmp_path / ".git").mkdir()
    spec = _spec(tmp_path, _pinned(tmp_path, ".git"))
    os.rename(tmp_path / ".git", tmp_path / "elsewhere")
    (tmp_path / ".git").symlink_to(tmp_path / "elsewhere")
    engine = _PinnedEngine()
    with pytest.raises(SandboxStartError) as refused:
        await backend_over(engine).start(spec)
    assert str(refused.value) == SET_UP_CHANGED
    assert engine.created == 0


async def test_the_engine_is_never_asked_when_the_way_changed_mode_before_the_turn(
    backend_over: Any, tmp_path: Path
) -> None:
    (tmp_path / ".git").mkdir()
    spec = _spec(tmp_path, _pinned(tmp_path, ".git")).model_copy(
        update={"host_way": _way(tmp_path, tmp_path / ".git")}
    )
    tmp_path.chmod(0o777)
    engine = _PinnedEngine()
    with pytest.raises(SandboxStartError) as refused:
        await backend_over(engine).start(spec)
    assert str(refused.value) == SET_UP_CHANGED
    assert engine.created == 0


class _PausingEngine:
    """pause fails as the engine does for a container that stops meanwhile; inspect tells."""

    def __init__(self, state: dict[str, Any] | None) -> None:
        self.state = state

    def pause(self, container_id: str) -> None:
        raise docker.errors.APIError(
            "500 Server Error", explanation="cannot pause a stopped container"
        )

    def inspect_container(self, container_id: str) -> dict[str, Any]:
        if self.state is None:
            raise docker.errors.NotFound("no such container")
        return {"State": self.state}


@pytest.mark.parametrize(
    ("state", "outcome"),
    [({"Running": False, "Paused": False}, "stopped"), (None, "gone")],
)
async def test_a_container_that_stops_as_it_is_frozen_is_told_apart_by_its_state(
    backend_over: Any, state: dict[str, Any] | None, outcome: str
) -> None:
    assert await backend_over(_PausingEngine(state)).freeze("c1") == outcome


async def test_a_running_container_the_engine_cannot_freeze_refuses_the_set_up(
    backend_over: Any,
) -> None:
    engine = _PausingEngine({"Running": True, "Paused": False})
    with pytest.raises(SandboxStartError):
        await backend_over(engine).freeze("c1")


class _LaggingEngine:
    """Round 121: the runtime already refuses to pause a container whose runner exited, while
    the engine's state still says it runs, for a moment."""

    def __init__(self, lagging_looks: int, *, pause_works_after: int | None = None) -> None:
        self.looks = 0
        self.pauses = 0
        self.lagging_looks = lagging_looks
        self.pause_works_after = pause_works_after

    def pause(self, container_id: str) -> None:
        self.pauses += 1
        if self.pause_works_after is None or self.pauses <= self.pause_works_after:
            raise docker.errors.APIError("500", explanation="container not running: unknown")

    def inspect_container(self, container_id: str) -> dict[str, Any]:
        self.looks += 1
        return {"State": {"Running": self.looks <= self.lagging_looks, "Paused": False}}


async def test_a_container_whose_exit_the_engine_has_not_seen_yet_is_stopped_not_refused(
    backend_over: Any,
) -> None:
    assert await backend_over(_LaggingEngine(lagging_looks=2)).freeze("c1") == "stopped"


async def test_a_pause_refused_for_a_moment_is_asked_again(backend_over: Any) -> None:
    engine = _LaggingEngine(lagging_looks=100, pause_works_after=1)
    assert await backend_over(engine).freeze("c1") == "frozen"


class _SlowEngine:
    """An engine that does not answer a pause in time."""

    def pause(self, container_id: str) -> None:
        raise requests.exceptions.ReadTimeout("read timed out")

    def inspect_container(self, container_id: str) -> dict[str, Any]:
        raise requests.exceptions.ReadTimeout("read timed out")


async def test_a_pause_the_engine_does_not_answer_is_no_unfreezable_container(
    backend_over: Any,
) -> None:
    with pytest.raises(SandboxStartError) as refused:
        await backend_over(_SlowEngine()).freeze("c1")
    assert not isinstance(refused.value, Unfreezable)


async def test_a_pause_the_runtime_keeps_refusing_is_an_unfreezable_container(
    backend_over: Any,
) -> None:
    with pytest.raises(Unfreezable):
        await backend_over(_LaggingEngine(lagging_looks=100)).freeze("c1")


def test_a_folder_on_the_way_given_to_an_account_by_an_acl_is_moved(tmp_path: Path) -> None:
    """An ACL changes no owner or mode bit (a mask already allowing group write), yet lets a
    named account rename entries: given after the judgement, the container is not made."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub").chmod(0o775)
    spec = _spec(tmp_path).model_copy(update={"host_way": _way(tmp_path, tmp_path / "sub")})
    assert moved_pin(spec) == ""
    raw = struct.pack("<I", 2) + b"".join(
        struct.pack("<HHI", tag, perm, who)
        for tag, perm, who in ((1, 7, 0xFFFFFFFF), (2, 7, 1500), (4, 5, 0xFFFFFFFF),
                               (0x10, 7, 0xFFFFFFFF), (0x20, 5, 0xFFFFFFFF))
    )  # fmt: skip
    os.setxattr(tmp_path / "sub", "system.posix_acl_access", raw)
    assert (tmp_path / "sub").stat().st_mode & 0o777 == 0o775
    assert "changed" in moved_pin(spec)
