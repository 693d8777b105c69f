"""A first-come, first-served shared/exclusive lock for asyncio.

Concurrency-safe calls of a session hold it shared; every other call holds it exclusively, so a
non-concurrency-safe call never overlaps any other call of its session, however the calls arrived
(one batch or separate RPCs). Waiters are served in arrival order, so a stream of shared holders
cannot starve an exclusive one. Releasing never awaits, so a cancelled holder can never leak it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator


class SharedExclusiveLock:
    """Many shared holders or one exclusive holder, granted in arrival order."""

    def __init__(self) -> None:
        self._shared = 0
        self._exclusive = False
        self._waiters: deque[tuple[bool, asyncio.Future[None]]] = deque()

    @property
    def idle(self) -> bool:
        """Nobody holds or waits for the lock."""
        return not self._shared and not self._exclusive and not self._waiters

    def _grantable(self, exclusive: bool) -> bool:
        if exclusive:
            return not self._exclusive and self._shared == 0
        return not self._exclusive

    def _take(self, exclusive: bool) -> None:
        if exclusive:
            self._exclusive = True
        else:
            self._shared += 1

    def _wake(self) -> None:
        while self._waiters:
            exclusive, future = self._waiters[0]
            if future.done():  # cancelled while waiting
                self._waiters.popleft()
                continue
            if not self._grantable(exclusive):
                return
            self._waiters.popleft()
            self._take(exclusive)
            future.set_result(None)
            if exclusive:
                return

    def _release(self, exclusive: bool) -> None:
        if exclusive:
            self._exclusive = False
        else:
            self._shared -= 1
        self._wake()

    async def _acquire(self, exclusive: bool) -> None:
        if not self._waiters and self._grantable(exclusive):
            self._take(exclusive)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((exclusive, future))
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self._release(exclusive)  # granted in the same instant we were cancelled
            else:
                self._wake()  # we may have been blocking waiters behind us
            raise

    @contextlib.asynccontextmanager
    async def hold(self, *, exclusive: bool) -> AsyncIterator[None]:
        """Hold the lock shared or exclusively for the duration of the block."""
        await self._acquire(exclusive)
        try:
            yield
        finally:
            self._release(exclusive)
