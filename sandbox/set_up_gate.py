"""No sandbox changes a workspace while a container holding its repository is set up.

The engine mounts a container's repository pins by name, following links on the host and in the
container. A sandbox of the same workspace (a background command, another tenant's call in the
shared default workspace, a sandbox over an enclosing folder) that swaps a pinned folder for a
link between the daemon's look and the runtime's mount steers the mount: over the runner's own
interpreter, or onto a host folder, whose existence the runtime even tells by making a missing
target there (attacker rounds 117-119). Whatever is checked after the start comes too late for
what the runtime has done by then.

So a set-up of a pinned container takes the workspace's turn: every container of a related
workspace (the same, one enclosing it, one inside it) that has had a request is frozen by the
engine (cgroup freezer: none of its processes runs until it is thawed), requests to the others
wait, the pins are looked at again, and only then is the engine asked. Containers that never had
a request run only the runner, which waits for one.

A tenant that sets up containers over and over must not keep another's commands frozen: a
container thawed after `d` seconds is not frozen again for another `d` (at most
`MAX_RUN_GAP_S`), so it runs at least half the time. Nor may a tenant keep everyone's set-ups
refused with a container the engine cannot freeze (processes held in long system calls): such a
container is stopped, as one whose processes cannot be held still while the workspace's mounts
are made.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

from sandbox.backend import SET_UP_CHANGED, SandboxStartError

log = logging.getLogger(__name__)

MAX_RUN_GAP_S = 2.0
"""Longest a set-up waits so that the containers frozen by the last one run again first."""
STOPPING_WAIT_S = 30.0
"""How long a set-up waits for a stopped container of a related workspace to be removed: until
then, processes of it stuck in the kernel may still finish a rename (attacker round 94), and the
engine can no longer freeze them. Nothing else waits meanwhile."""

SET_UP_TURNS = 3
"""Turns a set-up takes (each after waiting for stopped containers, or stopping unfreezable
ones) before it is refused."""

FreezeOutcome = Literal["frozen", "stopped", "gone"]


class Unfreezable(SandboxStartError):
    """The engine answered, and kept refusing to freeze a running container (its processes
    held in long system calls): it cannot be held still. Any other failure to freeze (an
    engine that does not answer) is no reason to stop a tenant's container."""


class Freezer(Protocol):
    """The engine's pause and unpause of one container."""

    async def freeze(self, container_id: str) -> FreezeOutcome:
        """Paused: "frozen"; it no longer runs but is not removed yet: "stopped"; removed:
        "gone". Raises Unfreezable when the engine keeps refusing, SandboxStartError when it
        could not be asked."""

    async def thaw(self, container_id: str) -> None:
        """Thawed, or gone (failures are the freezer's to log)."""

    async def gone(self, container_id: str) -> bool:
        """Whether the engine no longer has the container (False when it cannot tell)."""

    async def stop(self, container_id: str) -> bool:
        """Kill and remove the container; whether it is known gone."""


def related(one: str, other: str) -> bool:
    """Whether a sandbox of workspace `one` can change workspace `other` or the reverse: the
    same folder, or one inside the other (absolute paths with no link, as pinned)."""
    if one == other:
        return True
    shorter, longer = sorted((one, other), key=len)
    return longer.startswith(shorter.rstrip("/") + "/")


@dataclass
class _Hold:
    """One container frozen for the set-ups that need it (two unrelated workspaces inside its
    own may be set up at once)."""

    holders: int = 0
    frozen_at: float | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class SetUpGate:
    """Turns of the workspaces' set-ups, and the containers that may act in each (on the event
    loop only)."""

    def __init__(self, freezer: Freezer, clock: Callable[[], float] = time.monotonic) -> None:
        self._freezer = freezer
        self._clock = clock
        self._acting: dict[str, str] = {}
        """Containers that have had a request (and may still act), by id: their workspace."""
        self._setting_up: list[str] = []
        """Workspaces whose pinned container is being set up (one entry per set-up)."""
        self._holds: dict[str, _Hold] = {}
        self._runs_until: dict[str, float] = {}
        """Containers not to be frozen again before this time (they were frozen as long)."""
        self._changed = asyncio.Event()

    def acting(self) -> dict[str, str]:
        """The containers that may act, with their workspaces (a copy)."""
        return dict(self._acting)

    async def deliver(self, container_id: str, workspace: str) -> None:
        """Return once a request may go to `container_id` (no related set-up under way); from
        then on it counts as acting until `forget`."""
        while self._busy(workspace):
            await self._wait()
        self._acting[container_id] = workspace

    def forget(self, container_id: str) -> None:
        """`container_id` is removed: it acts no more."""
        self._acting.pop(container_id, None)
        self._runs_until.pop(container_id, None)
        self._wake()

    @contextlib.asynccontextmanager
    async def setting_up(self, workspace: str) -> AsyncIterator[None]:
        """The workspace's turn: every acting container of a related workspace frozen, no request
        delivered to one, until the block ends. Outside the turn (the others' requests go on
        meanwhile), a container found stopped, which the engine can no longer freeze, is waited
        for until the engine has removed it, and one the engine cannot freeze (its processes
        held in long system calls: attacker round 122) is stopped; then the turn is taken
        again. Raises SandboxStartError (with nothing left frozen) when one can be neither
        frozen nor removed, or after SET_UP_TURNS turns."""
        for _ in range(SET_UP_TURNS):
            await self._turn(workspace)
            self._setting_up.append(workspace)
            held: list[str] = []
            try:
                targets = [cid for cid, where in self._acting.items() if related(where, workspace)]
                outcomes = await asyncio.gather(
                    *(self._hold(cid) for cid in targets), return_exceptions=True
                )
                found = list(zip(targets, outcomes, strict=True))
                held = [cid for cid, got in found if got == "frozen"]
                stopped = [cid for cid, got in found if got == "stopped"]
                unfreezable = [cid for cid, got in found if isinstance(got, Unfreezable)]
                for _cid, got in found:
                    if isinstance(got, BaseException) and not isinstance(got, Unfreezable):
                        raise got
                if not stopped and not unfreezable:
                    yield
                    return
            finally:
                await asyncio.gather(*(self._release(cid) for cid in held))
                self._setting_up.remove(workspace)
                self._wake()
            await self._until_removed(stopped)
            await self._stop(unfreezable)
        raise SandboxStartError(SET_UP_CHANGED)

    def _busy(self, workspace: str) -> bool:
        return any(related(workspace, other) for other in self._setting_up)

    async def _turn(self, workspace: str) -> None:
        """Wait until no related set-up is under way and every related acting container has run
        as long as it was last frozen."""
        while True:
            if self._busy(workspace):
                await self._wait()
                continue
            now = self._clock()
            gap = max(
                (
                    self._runs_until.get(cid, 0.0) - now
                    for cid, where in self._acting.items()
                    if related(where, workspace)
                ),
                default=0.0,
            )
            if gap <= 0:
                return
            await asyncio.sleep(gap)

    async def _wait(self) -> None:
        await self._changed.wait()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _hold(self, container_id: str) -> FreezeOutcome:
        """Frozen for this set-up ("frozen"), or why not ("gone": forgotten; "stopped")."""
        hold = self._holds.setdefault(container_id, _Hold())
        hold.holders += 1
        outcome: FreezeOutcome | None = None  # None: freezing failed
        try:
            async with hold.lock:
                if hold.frozen_at is not None:  # frozen for another set-up already
                    outcome = "frozen"
                else:
                    outcome = await self._freezer.freeze(container_id)
                    if outcome == "frozen":
                        hold.frozen_at = self._clock()
        finally:
            if outcome != "frozen":
                await self._release_hold(container_id, hold)
        if outcome == "gone":
            self.forget(container_id)
        return outcome

    async def _until_removed(self, container_ids: list[str]) -> None:
        """Ask the engine until each of `container_ids` is gone (then forgotten): the daemon's
        own removal may have said "not known gone" while the engine's automatic one was under
        way. SandboxStartError after STOPPING_WAIT_S."""
        pause = 0.02
        try:
            async with asyncio.timeout(STOPPING_WAIT_S):
                for container_id in container_ids:
                    while not await self._freezer.gone(container_id):
                        await asyncio.sleep(pause)
                        pause = min(pause * 2, 1.0)
                    self.forget(container_id)
        except TimeoutError:
            log.warning(
                "a stopped sandbox container of a workspace being set up was not removed within "
                "%.0f s: its processes may still change the workspace; set-up refused",
                STOPPING_WAIT_S,
            )
            raise SandboxStartError(SET_UP_CHANGED) from None

    async def _stop(self, container_ids: list[str]) -> None:
        """Stop and remove each of `container_ids` (then forgotten); SandboxStartError when one
        is not known gone within STOPPING_WAIT_S."""
        for container_id in container_ids:
            log.warning(
                "sandbox container %s (workspace %s) could not be frozen while a container of a "
                "related workspace was set up (its processes stay in system calls): stopped",
                container_id[:12],
                self._acting.get(container_id, "?"),
            )
        try:
            async with asyncio.timeout(STOPPING_WAIT_S):
                gone = await asyncio.gather(*(self._freezer.stop(cid) for cid in container_ids))
        except TimeoutError:
            gone = [False]
        for container_id, removed in zip(container_ids, gone, strict=False):
            if removed:
                self.forget(container_id)
        if not all(gone):
            raise SandboxStartError(SET_UP_CHANGED)

    async def _release(self, container_id: str) -> None:
        hold = self._holds.get(container_id)
        if hold is not None:
            await self._release_hold(container_id, hold)

    async def _release_hold(self, container_id: str, hold: _Hold) -> None:
        hold.holders -= 1
        async with hold.lock:
            if hold.holders > 0:
                return
            if hold.frozen_at is not None:
                frozen_for = self._clock() - hold.frozen_at
                hold.frozen_at = None
                await self._freezer.thaw(container_id)
                if container_id in self._acting:
                    self._runs_until[container_id] = self._clock() + min(frozen_for, MAX_RUN_GAP_S)
            if hold.holders == 0 and self._holds.get(container_id) is hold:
                del self._holds[container_id]
