"""A bounded hand-over of progress from running calls to a possibly slow client.

The call never waits for the client and the daemon never buffers without bound: at most
`max_items` updates wait, each output chunk is cut to `max_chunk` characters, and when the client
falls behind the oldest waiting updates are dropped and counted (the final result is unaffected).
"""

from __future__ import annotations

import asyncio
import functools
from collections import deque
from collections.abc import Callable

from daemon.tools.contract import ProgressUpdate


class ProgressRelay:
    """Progress updates waiting for the client, each with the tool_use id of its call."""

    def __init__(self, max_items: int = 64, max_chunk: int = 8_192) -> None:
        self._items: deque[tuple[str, ProgressUpdate]] = deque()
        self._max_items = max_items
        self._max_chunk = max_chunk
        self._ready = asyncio.Event()
        self.dropped = 0
        """Updates dropped because the client read too slowly."""

    def sink(self, tool_use_id: str) -> Callable[[ProgressUpdate], None]:
        """Where one call's progress goes."""
        return functools.partial(self.push, tool_use_id)

    def push(self, tool_use_id: str, update: ProgressUpdate) -> None:
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
        self._items.append((tool_use_id, update))
        self._ready.set()

    async def wait(self) -> None:
        """Until at least one update waits."""
        await self._ready.wait()

    def take(self) -> list[tuple[str, ProgressUpdate]]:
        """Every waiting update with its call's tool_use id, oldest first."""
        items = list(self._items)
        self._items.clear()
        self._ready.clear()
        return items
