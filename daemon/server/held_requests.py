"""What each principal's open calls hold together, bounded: an RPC holds its request (converted,
with its checks) and its answers while its calls wait for a slot, run, or wait for the client
to read the answers, and a principal opening such RPCs without end would fill the daemon's
memory (attacker round 162: 30 unread ExecuteBatch streams of 16 MB requests held 560 MB). An
RPC counts its requests' bytes as received, and room for its answers (what a turn's results may
hold) from the start."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from daemon.errors import Overloaded

Take = Callable[[int], None]
"""Counts a request's bytes against its principal's share; Overloaded past it."""


class HeldRequests:
    """Bytes each principal's open RPCs hold."""

    def __init__(self, per_principal_bytes: int, answer_room: int) -> None:
        self._limit = per_principal_bytes
        self._answer_room = answer_room
        self._held: dict[str, int] = {}

    def held(self, principal: str) -> int:
        """What `principal`'s open RPCs hold now."""
        return self._held.get(principal, 0)

    @contextlib.contextmanager
    def holding(self, principal: str) -> Iterator[Take]:
        """Within: room for an RPC's answers is held for `principal`, and what `take` counts
        (its requests: one, or each message of a streamed turn); all of it is let go at the
        end. Overloaded when the answers' room does not fit."""
        taken = 0

        def take(size: int) -> None:
            nonlocal taken
            held = self._held.get(principal, 0)
            if held + size > self._limit:
                raise Overloaded(
                    f"your open requests hold {_mib(held)} together (with room for their "
                    f"answers) and this one {_mib(size)} more, past the {_mib(self._limit)} "
                    "one caller's may hold; wait for some of your calls to end (read their "
                    "answers) and retry"
                )
            self._held[principal] = held + size
            taken += size

        try:
            take(self._answer_room)
            yield take
        finally:
            if taken:
                left = self._held[principal] - taken
                if left:
                    self._held[principal] = left
                else:
                    del self._held[principal]


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"
