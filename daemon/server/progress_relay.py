"""A bounded hand-over of progress from a running call to a possibly slow client.

The call never waits for the client and the daemon never buffers without bound: at most
`max_items` updates wait, each output chunk is cut to `max_chunk` characters, and when the client
falls behind the oldest waiting updates are dropped and counted (the final result is unaffected).
"""

from __future__ import annotations

import asyncio
from collections import deque

from daemon.tools.contract import ProgressUpdate


class ProgressRelay:
    """Progress updates waiting for the client."""

    def __init__(self, max_items: int = 64, max_chunk: int = 8_192) -> None:
        self._items: deque[ProgressUpdate] = deque()
        self._max_items = max_items
        self._max_chunk = max_chunk
        self._ready = asyncio.Event()
        self.dropped = 0
        """Updates dropped because the client read too slowly."""

    def push(self, update: ProgressUpdate) -> None:
        """Called by the running tool; never blocks."""
        if len(update.output) > self._max_chunk:
            cut = len(update.output) - self._max_chunk
            update = ProgressUpdate(
                output=update.output[: self._max_chunk] + f"\n[... {cut} characters not shown]\n",
                files_scanned=update.files_scanned,
                message=update.message,
            )
        if len(self._items) >= self._max_items:
            self._items.popleft()
            self.dropped += 1
        self._items.append(update)
        self._ready.set()

    async def wait(self) -> None:
        """Until at least one update waits."""
        await self._ready.wait()

    def take(self) -> list[ProgressUpdate]:
        """Every waiting update, oldest first."""
        items = list(self._items)
        self._items.clear()
        self._ready.clear()
        return items
