"""Where the time of one call goes: named marks on the monotonic clock, from the call's arrival
to its answer, for the phase metrics (`tooljail_call_phase_seconds`) and the benchmark's
breakdown of a sandboxed call.

The pipeline opens a timeline per call (`recording`); any layer below marks the end of a phase
with `mark` without being handed anything (a context variable carries it, and asyncio tasks
started for the call inherit it). Outside a recorded call `mark` does nothing. A phase's length
is the time from the previous mark to its own.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextvars import ContextVar

#: Marks one call keeps at most: a loop that marks cannot grow a timeline without bound.
MAX_MARKS = 32


class Timeline:
    """The marks of one call, in the order they were made."""

    def __init__(self, origin: float) -> None:
        self.origin = origin
        self._marks: list[tuple[str, float]] = []
        self._last = origin

    def mark(self, name: str, at: float | None = None) -> None:
        """End the phase `name` now (or at `at`, a monotonic time). One before the last mark ends
        the phase with no length (the runner's first mark can come before the daemon's `sent`
        on another core); one before the call, in the future or not a number is ignored: a clock
        from elsewhere cannot make a phase negative."""
        now = time.monotonic() if at is None else at
        if len(self._marks) >= MAX_MARKS or not self.origin <= now <= time.monotonic():
            return
        now = max(now, self._last)
        self._marks.append((name, now - self._last))
        self._last = now

    def phases(self) -> list[tuple[str, float]]:
        """(phase, seconds) in order; a name marked twice (a retry) appears twice."""
        return list(self._marks)


_current: ContextVar[Timeline | None] = ContextVar("tooljail_call_timeline", default=None)


def mark(name: str, at: float | None = None) -> None:
    """End the phase `name` of the call being recorded, if any."""
    timeline = _current.get()
    if timeline is not None:
        timeline.mark(name, at)


@contextlib.contextmanager
def recording(origin: float) -> Iterator[Timeline]:
    """Record the marks made inside (and in tasks started inside) on a new timeline."""
    timeline = Timeline(origin)
    token = _current.set(timeline)
    try:
        yield timeline
    finally:
        _current.reset(token)
