"""What each principal's open calls hold together, bounded: an RPC holds its request (converted,
with its checks) and its answers while its calls wait for a slot, run, or wait for the client
to read the answers, and a principal opening such RPCs without end would fill the daemon's
memory (attacker round 162: 30 unread ExecuteBatch streams of 16 MB requests held 560 MB). An
RPC counts its requests' bytes (as received, then what their conversion holds more), and room
for its answers from the start; all of it until the RPC has ended."""

from __future__ import annotations

from collections.abc import Callable

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

    def hold(self, principal: str) -> Holding:
        """What one RPC of `principal`'s holds, starting with room for its answers (Overloaded
        when that does not fit); `Holding.release` lets all of it go."""
        holding = Holding(self, principal)
        holding.take(self._answer_room)
        return holding

    def _take(self, principal: str, size: int) -> None:
        held = self._held.get(principal, 0)
        if held + size > self._limit:
            raise Overloaded(
                f"your open requests hold {_mib(held)} together (with room for their answers) "
                f"and this one {_mib(size)} more, past the {_mib(self._limit)} one caller's may "
                "hold; wait for some of your calls to end (read their answers) and retry"
            )
        self._held[principal] = held + size

    def _release(self, principal: str, size: int) -> None:
        left = self._held[principal] - size
        if left:
            self._held[principal] = left
        else:
            del self._held[principal]


class Holding:
    """What one RPC holds of its principal's share."""

    def __init__(self, ledger: HeldRequests, principal: str) -> None:
        self._ledger = ledger
        self._principal = principal
        self._taken = 0

    def take(self, size: int) -> None:
        """Count `size` more bytes (Overloaded past the share: then nothing is counted)."""
        self._ledger._take(self._principal, size)
        self._taken += size

    def release(self) -> None:
        """Let everything taken go (once; later calls do nothing)."""
        taken, self._taken = self._taken, 0
        if taken:
            self._ledger._release(self._principal, taken)


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"
