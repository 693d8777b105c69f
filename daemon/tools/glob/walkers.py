"""The threads Glob walks on: a bounded pool of its own, apart from the event loop's default
executor, so walks neither crowd out the other host-side work (Read, the file tools) nor grow
without limit. Its threads are daemon threads, unlike a ThreadPoolExecutor's (joined at exit): a
walk stuck in the kernel on a hung mount must not keep tooljail from shutting down."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")

WALKERS = 4
"""Walks at once: walking is mostly Python under the GIL, so more threads than this would only
take turns; further calls wait in line (their deadline runs meanwhile)."""


class WalkerPool:
    """At most `size` threads, started on demand, running submitted work in order."""

    def __init__(self, size: int = WALKERS, name: str = "tooljail-glob") -> None:
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
