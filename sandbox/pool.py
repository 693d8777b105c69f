"""Bookkeeping of the warm pool: started, never-used sandboxes waiting per profile key.

Pure state, no I/O and no tasks: the executor decides when to start and destroy containers and
asks the pool what is ready, what is missing and what has idled too long. A sandbox leaves the
pool exactly once (taken, expired or drained), which is what guarantees it is never reused.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from sandbox.backend import Sandbox


@dataclass(frozen=True)
class _Entry:
    sandbox: Sandbox
    since: float


class WarmPool:
    """Never-used sandboxes per key, handed out first in, first out (the most settled first).

    Args:
        size: Sandboxes kept ready per key (0 disables the pool).
        idle_ttl_s: A sandbox that waited this long is expired.
        max_total: Ready plus starting sandboxes over all keys never exceed this.
        max_per_owner: Ready plus starting sandboxes of one owner's keys never exceed this, and
            an owner under it may take room from the owner holding the most (None: no shares).
        owner_of: The owner of a key (whose share its sandboxes count against).
        clock: Monotonic seconds; injectable for tests.
    """

    def __init__(
        self,
        *,
        size: int,
        idle_ttl_s: float,
        max_total: int,
        max_per_owner: int | None = None,
        owner_of: Callable[[Hashable], Hashable] = lambda key: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if size < 0 or idle_ttl_s <= 0 or max_total < 0 or (max_per_owner or 0) < 0:
            raise ValueError("pool sizes and shares must be >= 0 and idle_ttl_s > 0")
        self.size = size
        self.idle_ttl_s = idle_ttl_s
        self.max_total = max_total
        self.max_per_owner = max_per_owner
        self._owner_of = owner_of
        self._clock = clock
        self._ready: dict[Hashable, deque[_Entry]] = {}
        self._starting: dict[Hashable, int] = {}
        self._expired: list[Sandbox] = []

    def take(self, key: Hashable) -> Sandbox | None:
        """A ready sandbox for `key` that has not expired, or None (the caller starts one cold)."""
        entries = self._ready.get(key)
        now = self._clock()
        found: Sandbox | None = None
        while entries and found is None:
            entry = entries.popleft()
            if now - entry.since >= self.idle_ttl_s:
                self._expired.append(entry.sandbox)  # handed to the destroyer by expire()
            else:
                found = entry.sandbox
        if entries is not None and not entries:
            del self._ready[key]
        return found

    def deficit(self, key: Hashable) -> int:
        """How many sandboxes to start now so that `key` gets back to its size."""
        return max(0, min(self._missing(key), self.max_total - self.total()))

    def make_room(self, key: Hashable) -> list[Sandbox]:
        """When the pool is full but `key`'s owner is under its share: remove and return the
        oldest ready sandboxes of the owner holding the most (the caller destroys them), so
        one owner's many keys cannot keep every other owner cold."""
        if self.max_per_owner is None:
            return []
        owner = self._owner_of(key)
        needed = self._missing(key) - (self.max_total - self.total())
        evicted: list[Sandbox] = []
        while needed > 0:
            held = self._held_by_owner()
            richest = max(
                (o for o in held if o != owner and held[o] > held.get(owner, 0) + 1),
                key=lambda o: held[o],
                default=None,
            )
            oldest = self._oldest_ready(richest) if richest is not None else None
            if oldest is None:
                break
            evicted.append(self._ready[oldest].popleft().sandbox)
            if not self._ready[oldest]:
                del self._ready[oldest]
            needed -= 1
        return evicted

    def _missing(self, key: Hashable) -> int:
        missing = self.size - len(self._ready.get(key, ())) - self._starting.get(key, 0)
        if self.max_per_owner is not None:
            held = self._held_by_owner().get(self._owner_of(key), 0)
            missing = min(missing, self.max_per_owner - held)
        return missing

    def _held_by_owner(self) -> dict[Hashable, int]:
        """Ready plus starting sandboxes per owner."""
        held: dict[Hashable, int] = {}
        for key, entries in self._ready.items():
            owner = self._owner_of(key)
            held[owner] = held.get(owner, 0) + len(entries)
        for key, count in self._starting.items():
            owner = self._owner_of(key)
            held[owner] = held.get(owner, 0) + count
        return held

    def _oldest_ready(self, owner: Hashable) -> Hashable | None:
        """The key of `owner` whose first ready sandbox waited longest."""
        keys = [k for k, e in self._ready.items() if e and self._owner_of(k) == owner]
        return min(keys, key=lambda k: self._ready[k][0].since, default=None)

    def starting(self, key: Hashable, delta: int) -> None:
        """Record that `delta` sandboxes for `key` began (+) or finished (-) starting."""
        count = self._starting.get(key, 0) + delta
        if count > 0:
            self._starting[key] = count
        else:
            self._starting.pop(key, None)

    def add(self, key: Hashable, sandbox: Sandbox) -> bool:
        """Offer a freshly started sandbox; False when it is not wanted (caller destroys it)."""
        entries = self._ready.setdefault(key, deque())
        if len(entries) >= self.size:
            if not entries:
                del self._ready[key]
            return False
        entries.append(_Entry(sandbox, self._clock()))
        return True

    def expire(self) -> list[Sandbox]:
        """Remove and return every sandbox that waited longer than the idle TTL."""
        now = self._clock()
        expired, self._expired = self._expired, []
        for key in list(self._ready):
            entries = self._ready[key]
            while entries and now - entries[0].since >= self.idle_ttl_s:
                expired.append(entries.popleft().sandbox)
            if not entries:
                del self._ready[key]
        return expired

    def drain_keys(self, matches: Callable[[Hashable], bool]) -> list[Sandbox]:
        """Remove and return the ready sandboxes of every key that `matches`."""
        drained: list[Sandbox] = []
        for key in [k for k in self._ready if matches(k)]:
            drained += [entry.sandbox for entry in self._ready.pop(key)]
        return drained

    def drain(self) -> list[Sandbox]:
        """Remove and return every ready sandbox."""
        drained = [entry.sandbox for entries in self._ready.values() for entry in entries]
        drained += self._expired
        self._ready.clear()
        self._expired = []
        return drained

    def ready(self, key: Hashable | None = None) -> int:
        """Ready sandboxes for `key`, or over all keys."""
        if key is not None:
            return len(self._ready.get(key, ()))
        return sum(len(entries) for entries in self._ready.values())

    def total(self) -> int:
        """Ready plus starting sandboxes over all keys."""
        return self.ready() + sum(self._starting.values())
