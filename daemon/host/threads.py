"""Threads for blocking work, apart from the event loop's default executor.

`DaemonThreads` is a bounded pool of daemon threads, unlike a ThreadPoolExecutor's (joined at
exit): work stuck in the kernel on a hung mount must not keep tooljail from shutting down.

`TenantThreads` runs the blocking filesystem work done for a tenant (a session's owner): a
workspace may be on a filesystem its owner mounted, and work that asks it may wait forever. Each
tenant gets at most `PER_TENANT` threads at once; its further work waits for its own, and no
other tenant's work ever waits for them. A thread stuck on a hung mount keeps its tenant's slot
until the kernel lets it go, even after the call that started it has ended: that is what bounds
what one tenant can tie up.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")

PER_TENANT = 4
"""Threads one tenant's filesystem work may hold at once."""
TENANT_THREADS = 256
"""Threads all tenants' filesystem work may hold at once (started on demand)."""


class DaemonThreads:
    """At most `size` threads, started on demand, running submitted work in order."""

    def __init__(self, size: int, name: str) -> None:
        self._size = size
        self._name = name
        self._queue: deque[tuple[Callable[[], Any], Future[Any]]] = deque()
        self._ready = threading.Condition()
        self._threads = 0
        self._idle = 0

    def submit(self, work: Callable[[], T]) -> Future[T]:
        """Queue `work`; its future can be cancelled until a thread takes it up."""
        future: Future[T] = Future()
        with self._ready:
            self._queue.append((work, future))
            if len(self._queue) > self._idle and self._threads < self._size:
                self._threads += 1
                number = self._threads
                threading.Thread(
                    target=self._serve, name=f"{self._name}-{number}", daemon=True
                ).start()
            else:
                self._ready.notify()
        return future

    def _serve(self) -> None:
        while True:
            with self._ready:
                while not self._queue:
                    self._idle += 1
                    self._ready.wait()
                    self._idle -= 1
                work, future = self._queue.popleft()
            if not future.set_running_or_notify_cancel():
                continue  # cancelled while it waited in line
            try:
                result = work()
            except Exception as exc:  # noqa: BLE001 - handed over: the awaiting call decides
                future.set_exception(exc)
            else:
                future.set_result(result)


class TenantThreads:
    """Blocking filesystem work, per tenant at most `per_tenant` threads at once (see above)."""

    def __init__(
        self, per_tenant: int = PER_TENANT, threads: int = TENANT_THREADS, name: str = "tooljail-fs"
    ) -> None:
        self._per_tenant = per_tenant
        self._pool = DaemonThreads(threads, name)
        self._held: dict[str, int] = {}
        self._counting = threading.Lock()
        self._waiting: dict[str, deque[asyncio.Future[None]]] = {}

    def held(self, tenant: str) -> int:
        """Threads `tenant`'s work holds now (stuck ones included)."""
        return self._held.get(tenant, 0)

    async def run(
        self, tenant: str, work: Callable[[], T], release: Callable[[T], object] | None = None
    ) -> T:
        """`work()` in a thread once `tenant` has one free; cancelling the wait leaves a started
        thread running, and holding its slot, until it returns. What it returns then (a
        descriptor nobody will close) is given to `release`."""
        await self._take(tenant)
        loop = asyncio.get_running_loop()
        try:
            future = self._pool.submit(work)
        except BaseException:  # no thread could be started: the slot was never used
            self._give_back(tenant)
            raise

        def done(_: Future[Any]) -> None:
            try:
                loop.call_soon_threadsafe(self._give_back, tenant)
            except RuntimeError:  # its loop is closed: nobody of that loop waits any more
                self._release(tenant)

        future.add_done_callback(done)
        try:
            return await asyncio.wrap_future(future)
        except BaseException:
            if release is not None:
                future.add_done_callback(functools.partial(_release_unused, release))
            raise

    async def _take(self, tenant: str) -> None:
        with self._counting:
            if self._held.get(tenant, 0) < self._per_tenant and not self._waiting.get(tenant):
                self._held[tenant] = self._held.get(tenant, 0) + 1
                return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(tenant, deque()).append(turn)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self._give_back(tenant)  # handed a slot as it was cancelled: pass it on
            else:
                queue = self._waiting.get(tenant)
                if queue is not None and turn in queue:
                    queue.remove(turn)
                    if not queue:
                        del self._waiting[tenant]
            raise

    def _give_back(self, tenant: str) -> None:
        """One of `tenant`'s threads is free: to its next waiting work, or released."""
        waiting = self._waiting.get(tenant)
        while waiting:
            turn = waiting.popleft()
            if not waiting:
                del self._waiting[tenant]
            if not turn.done():
                turn.set_result(None)  # the slot passes on, still held
                return
            waiting = self._waiting.get(tenant)
        self._release(tenant)

    def _release(self, tenant: str) -> None:
        """One of `tenant`'s slots is no longer held (from any thread: the counts are shared by
        every event loop that uses these threads)."""
        with self._counting:
            held = self._held.get(tenant, 0) - 1
            if held > 0:
                self._held[tenant] = held
            else:
                self._held.pop(tenant, None)


def _release_unused(release: Callable[[T], object], future: Future[T]) -> None:
    if not future.cancelled() and future.exception() is None:
        release(future.result())


FILESYSTEM_THREADS = TenantThreads()
"""The daemon's threads for blocking work on workspaces."""
