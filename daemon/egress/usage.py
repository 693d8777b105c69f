"""One call's egress so far: connections, bytes, budgets, refusals, the connections still open.

Budgets come from the policy's decisions (the smallest any decision gave) under the daemon's
ceilings. Bytes count both directions over all of the call's connections; once the budget is
spent every open connection of the call is closed, not only the one that crossed it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

#: Refusals listed in the result note; more are counted, not listed.
MAX_LISTED_REFUSALS = 8


@dataclass(frozen=True)
class Refusal:
    """A destination the call could not reach, and why (for the model)."""

    destination: str
    reason: str


@dataclass
class CallUsage:
    """Counters and budgets of one call's egress."""

    max_connections: int
    max_bytes: int
    max_refusals: int = 64
    """Refusals (policy, budget, malformed requests) after which the call's egress is closed:
    every further connection ends at once, without asking the policy or writing the audit."""
    connections: int = 0
    bytes: int = 0
    refusals: list[Refusal] = field(default_factory=list)
    refused: int = 0
    suppressed: int = 0
    """Connections ended at once after the egress was closed (counted, not audited one by one)."""
    spent: str = ""
    """Set once a budget is spent: why the call's connections were closed."""
    _open: set[Callable[[], None]] = field(default_factory=set)
    """How to close each open connection (callable from any thread)."""
    _lock: threading.Lock = field(default_factory=threading.Lock)
    """Bytes are counted by the event loop and by the worker threads carrying exchanges."""

    def tighten(self, max_connections: int | None, max_bytes: int | None) -> None:
        """Apply a decision's budget (budgets only ever shrink)."""
        if max_connections is not None:
            self.max_connections = min(self.max_connections, max_connections)
        if max_bytes is not None:
            self.max_bytes = min(self.max_bytes, max_bytes)

    def refuse(self, destination: str, reason: str) -> None:
        """Remember a refusal for the result note (each destination and reason once)."""
        self.refused += 1
        refusal = Refusal(destination, reason)
        if refusal not in self.refusals and len(self.refusals) < MAX_LISTED_REFUSALS:
            self.refusals.append(refusal)

    @property
    def closed_for_refusals(self) -> bool:
        """Too many refusals: the call's egress is closed."""
        return self.refused >= self.max_refusals

    def reserve(self) -> str:
        """Take one connection of the budget (at the decision, before connecting, so that
        connections decided at once cannot all pass); why not, or "" when taken."""
        if self.spent:
            return self.spent
        if self.connections >= self.max_connections:
            return (
                f"the call's connection budget ({self.max_connections}) is spent; do the rest "
                "in another call, or with fewer connections"
            )
        self.connections += 1
        return ""

    def track(self, close: Callable[[], None]) -> None:
        """Keep how to close one of the call's connections when a budget is spent."""
        with self._lock:
            self._open.add(close)

    def closed(self, close: Callable[[], None]) -> None:
        """Forget a connection that ended."""
        with self._lock:
            self._open.discard(close)

    def add_bytes(self, count: int) -> bool:
        """Count bytes carried; False (and every open connection closed) once over budget.
        Callable from any thread."""
        with self._lock:
            self.bytes += count
            if self.bytes <= self.max_bytes:
                return True
            if not self.spent:
                self.spent = (
                    f"the call's byte budget ({self.max_bytes} bytes) is spent; its "
                    "connections were closed"
                )
        self.close_all()
        return False

    def close_all(self) -> None:
        """Close every connection of the call that is still open."""
        with self._lock:
            closes, self._open = list(self._open), set()
        for close in closes:
            close()

    def note(self) -> str:
        """The result note: refused destinations and why ("" when nothing was refused)."""
        if not self.refusals and not self.spent and not self.suppressed:
            return ""
        lines = ["Network (egress proxy):"]
        lines += [f"- {r.destination} refused: {r.reason}" for r in self.refusals]
        if self.refused > len(self.refusals):
            lines.append(f"- {self.refused - len(self.refusals)} more refusals not listed")
        if self.closed_for_refusals:
            lines.append(
                f"- after {self.refused} refusals the call's network was closed"
                + (
                    f" ({self.suppressed} more connections ended at once)"
                    if self.suppressed
                    else ""
                )
                + "; change course rather than retrying"
            )
        if self.spent:
            lines.append(f"- {self.spent}")
        return "\n".join(lines)
