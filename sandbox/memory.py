"""The memory all running sandboxes may hold together, and each principal's share of it.

Every container has a memory limit, but limits alone do not protect the host: enough calls at
once, each within its own limit, can together ask for more than the machine has, and then the
kernel's OOM killer picks among the engine, OPA and the daemon as well. So a call reserves what
its container can make the host hold (its memory limit and its socket buffers: see
`socket_memory`) here before it takes or starts a container, and the reservation is returned
only once that container is known removed (tmpfs pages and the page cache stay charged to it
until then). The sum of reservations never passes the budget, and one principal's never passes
its share: whatever one principal runs, the others keep the rest of the budget. Principals
together can fill it (with a share of a half, two of them), so a deployment with many tenants
gives each a smaller share.

A call that does not fit waits, first come first served, up to `wait_s`; then it fails with
nothing run. A waiter held back by its own principal's share does not hold up the others; one
held back by the total does (a large request is not starved by a stream of small ones). Warm
containers waiting in the pool hold nothing: nothing runs in them until a call takes one with
its reservation.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path

from sandbox.backend import SandboxStartError

HOST_SHARE = 0.75
"""The budget when none is configured: this much of the host's memory (the rest stays for the
kernel, the engine, OPA, the daemon and the warm pool)."""


class MemoryRefused(SandboxStartError):
    """The call's container would not fit in the memory budget (now, or ever); nothing ran."""


@dataclass(eq=False)
class Reservation:
    """Memory held for one container until it is removed."""

    owner: Hashable
    mb: int
    released: bool = False


@dataclass(eq=False)
class _Waiter:
    owner: Hashable
    mb: int
    granted: asyncio.Future[Reservation]


class MemoryBudget:
    """The ledger of memory reserved for sandbox containers.

    Args:
        total_mb: What all reservations together may reach.
        owner_share: The fraction of `total_mb` one owner's reservations may reach.
        wait_s: How long a request that does not fit waits before it is refused.
    """

    def __init__(self, total_mb: int, *, owner_share: float = 0.5, wait_s: float = 30.0) -> None:
        if total_mb < 1 or not 0 < owner_share <= 1 or wait_s < 0:
            raise ValueError("the memory budget needs total_mb >= 1, 0 < share <= 1, wait_s >= 0")
        self.total_mb = total_mb
        self.owner_mb = max(1, int(total_mb * owner_share))
        self._wait_s = wait_s
        self._held = 0
        self._held_by: dict[Hashable, int] = {}
        self._waiters: list[_Waiter] = []
        self.refusals = 0
        """Requests refused (too large, or waited too long)."""

    def held(self, owner: Hashable | None = None) -> int:
        """MB reserved now, in all or by one owner."""
        return self._held if owner is None else self._held_by.get(owner, 0)

    async def reserve(self, owner: Hashable, mb: int) -> Reservation:
        """Reserve `mb` for `owner`, waiting for room up to `wait_s`.

        Raises:
            MemoryRefused: More than the budget or the owner's share could ever hold, or no room
                came in time.
        """
        if mb > self.owner_mb:
            self.refusals += 1
            raise MemoryRefused(
                f"the call asks for {mb} MB of memory, more than one principal's sandboxes may "
                f"hold together ({self.owner_mb} MB); nothing ran. Ask the policy for less "
                "memory for this call"
            )
        if not self._waiters and self._fits(owner, mb):
            return self._grant(owner, mb)
        waiter = _Waiter(owner, mb, asyncio.get_running_loop().create_future())
        self._waiters.append(waiter)
        self._serve()  # those ahead may be held back only by their own shares
        started = time.monotonic()
        try:
            return await asyncio.wait_for(asyncio.shield(waiter.granted), self._wait_s)
        except TimeoutError:
            self._give_up(waiter)
            self.refusals += 1
            raise MemoryRefused(self._busy(owner, mb, time.monotonic() - started)) from None
        except BaseException:
            self._give_up(waiter)
            raise

    def release(self, reservation: Reservation) -> None:
        """Return a reservation (its container is gone); a second release does nothing."""
        if reservation.released:
            return
        reservation.released = True
        self._held -= reservation.mb
        left = self._held_by[reservation.owner] - reservation.mb
        if left:
            self._held_by[reservation.owner] = left
        else:
            del self._held_by[reservation.owner]
        self._serve()

    def close(self) -> None:
        """Refuse every waiter at once (the executor is closing)."""
        for waiter in self._waiters:
            if not waiter.granted.done():
                waiter.granted.set_exception(
                    MemoryRefused("the sandbox executor is closed (the daemon is shutting down)")
                )
        self._waiters.clear()

    def _fits(self, owner: Hashable, mb: int) -> bool:
        return self._held + mb <= self.total_mb and self.held(owner) + mb <= self.owner_mb

    def _grant(self, owner: Hashable, mb: int) -> Reservation:
        self._held += mb
        self._held_by[owner] = self.held(owner) + mb
        return Reservation(owner, mb)

    def _serve(self) -> None:
        """Grant waiters in order; one blocked by its owner's share is passed over, one blocked
        by the total stops the round."""
        for waiter in list(self._waiters):
            if waiter.granted.done():
                continue
            if self.held(waiter.owner) + waiter.mb > self.owner_mb:
                continue
            if self._held + waiter.mb > self.total_mb:
                return
            self._waiters.remove(waiter)
            waiter.granted.set_result(self._grant(waiter.owner, waiter.mb))

    def _give_up(self, waiter: _Waiter) -> None:
        """A waiter that timed out or was cancelled leaves the line; room granted to it in the
        same moment goes back, and those behind it may fit now."""
        with contextlib.suppress(ValueError):
            self._waiters.remove(waiter)
        granted = waiter.granted
        if not granted.done():
            granted.cancel()
        elif not granted.cancelled() and granted.exception() is None:
            self.release(granted.result())
        self._serve()

    def _busy(self, owner: Hashable, mb: int, waited_s: float) -> str:
        return (
            f"the sandboxes running now hold the memory this call's container needs ({mb} MB): "
            f"{self._held} of the {self.total_mb} MB all sandboxes may hold, {self.held(owner)} "
            f"of the {self.owner_mb} MB this principal's may hold. Nothing ran after "
            f"{waited_s:.0f} s of waiting; retry when fewer commands run, or ask for less memory"
        )


def host_memory_mb(meminfo: Path = Path("/proc/meminfo")) -> int:
    """The host's memory in MB (MemTotal), 0 when it cannot be read."""
    try:
        for line in meminfo.read_text(encoding="ascii").splitlines():
            name, _, rest = line.partition(":")
            if name == "MemTotal":
                return int(rest.split()[0]) // 1024
    except (OSError, ValueError, IndexError):
        return 0
    return 0


def default_budget_mb(host_mb: int) -> int:
    """The budget when none is configured (see `HOST_SHARE`); at least 1."""
    return max(1, int(host_mb * HOST_SHARE))
