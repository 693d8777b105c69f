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
        clock: Monotonic seconds; injectable for tests.
    """

    def __init__(
        self,
        *,
        size: int,
        idle_ttl_s: float,
        max_total: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if size < 0 or idle_ttl_s <= 0 or max_total < 0:
            raise ValueError("pool size and max_total must be >= 0 and idle_ttl_s > 0")
        self.size = size
        self.idle_ttl_s = idle_ttl_s
        self.max_total = max_total
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
        missing = self.size - len(self._ready.get(key, ())) - self._starting.get(key, 0)
        room = self.max_total - self.total()
        return max(0, min(missing, room))

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
