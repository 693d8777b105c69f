"""Calls of one parallel group that may share a piece of work.

The calls of a parallel group (one assistant turn) reach their tools at slightly different times:
each has its own decision, hooks and slot. A tool that can serve several calls with one piece of
work (Grep: one walk of a tree for several patterns) joins the group's `Peers` with a key saying
what must be equal for sharing. Once no other member can still join (each has joined or is gone)
or `wait_s` after the first join, the members with equal keys form a `Cohort`, and the first of
them to ask runs the work for all.

Waiting is bounded: a sibling held up (a slow hook, a full slot queue) delays the others by at
most `wait_s`, and one that joins after that runs alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Iterable
from typing import Any

DEFAULT_WAIT_S = 0.2
"""How long joined members wait for siblings that may still join."""


class Cohort:
    """Members that joined with equal keys; `items` in the order they joined."""

    def __init__(self, items: Iterable[Any]) -> None:
        self.items: tuple[Any, ...] = tuple(items)
        self._work: asyncio.Future[Any] | None = None
        self._waiting = 0

    async def share(self, work: Callable[[tuple[Any, ...]], Awaitable[Any]]) -> Any:
        """The result of `work(items)`, run once for the whole cohort (by the first caller).

        A member cancelled while waiting leaves the work running for the others; the work is
        cancelled only when nobody waits for it any more.
        """
        if self._work is None:
            self._work = asyncio.ensure_future(work(self.items))
        running = self._work
        self._waiting += 1
        try:
            return await asyncio.shield(running)
        finally:
            self._waiting -= 1
            if self._waiting == 0 and not running.done():
                running.cancel()


class Peers:
    """The members of one parallel group that may share work, by member number."""

    def __init__(self, members: Iterable[int], wait_s: float = DEFAULT_WAIT_S) -> None:
        self._open = set(members)
        """Members that may still join."""
        self._wait_s = wait_s
        self._joined: dict[Hashable, list[tuple[int, Any]]] = {}
        self._closed = asyncio.Event()
        self._cohorts: dict[int, tuple[Cohort, int]] = {}
        self._timer: asyncio.TimerHandle | None = None

    def handle(self, member: int) -> PeerHandle:
        """What one member's call gets (in its CallContext)."""
        return PeerHandle(self, member)

    def leave(self, member: int) -> None:
        """The member will not join (it finished, failed, or runs alone); idempotent."""
        self._open.discard(member)
        if not self._open:
            self._close()

    async def join(self, member: int, key: Hashable, item: Any) -> tuple[Cohort, int]:
        """Wait until the cohorts are formed; this member's cohort and its place in it. A member
        joining after that (or twice) gets a cohort of its own at once."""
        if self._closed.is_set() or member not in self._open:
            return Cohort([item]), 0
        self._joined.setdefault(key, []).append((member, item))
        self._open.discard(member)
        if not self._open:
            self._close()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._wait_s, self._close)
        await self._closed.wait()
        return self._cohorts[member]

    def _close(self) -> None:
        if self._closed.is_set():
            return
        if self._timer is not None:
            self._timer.cancel()
        for joined in self._joined.values():
            cohort = Cohort(item for _, item in joined)
            for place, (member, _) in enumerate(joined):
                self._cohorts[member] = (cohort, place)
        self._closed.set()


class PeerHandle:
    """One member's side of its group's Peers."""

    def __init__(self, peers: Peers, member: int) -> None:
        self._peers = peers
        self._member = member

    async def join(self, key: Hashable, item: Any) -> tuple[Cohort, int]:
        """See Peers.join."""
        return await self._peers.join(self._member, key, item)

    def leave(self) -> None:
        """See Peers.leave."""
        self._peers.leave(self._member)
