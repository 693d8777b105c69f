"""A turn budget: the results of one assistant turn together stay under a total.

Each result already fits its own budget; a turn of many calls could still hand the model far more
than it can use. The results of an ExecuteBatch (or of single Execute calls that name the same
turn) are counted in the order they are answered; when the next one would not leave room for the
others, the largest of those known by then are kept whole (daemon.calls.kept_outputs) and answered
with a preview, the largest first. A turn never holds less than MIN_BUDGET characters per call.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from daemon.calls.budget import MIN_BUDGET
from daemon.models import ExecuteOutcome

PREVIEW_ROOM = 3_600
"""What a result previewed for the turn takes (the preview of daemon.calls.kept_outputs)."""

Shrink = Callable[[ExecuteOutcome, int], Awaitable[ExecuteOutcome]]
"""Answers a result in at most that many characters (kept whole and previewed, or cut)."""


def result_chars(outcome: ExecuteOutcome) -> int:
    """The characters of a result the turn counts (its text; images are not characters)."""
    return len(outcome.result.text())


class TurnBudget:
    """The accounting of one turn of `calls` calls (0: not known, single calls that opted in).

    Args:
        total: What the turn's results may hold together (the policy may lower it per call).
        calls: How many calls the turn has, when known.
    """

    def __init__(self, total: int, calls: int) -> None:
        self._floor_total = MIN_BUDGET * max(calls, 1)
        self.total = max(total, self._floor_total)
        self._calls = calls
        self.used = 0
        self._answered = 0
        self.opened = time.monotonic()

    async def admit(
        self, outcome: ExecuteOutcome, shrink: Shrink, known_later: Sequence[ExecuteOutcome] = ()
    ) -> ExecuteOutcome:
        """`outcome`, or its shrunk form when the turn cannot hold it; `known_later` are the
        finished results answered after it (a larger one of those is shrunk first)."""
        if outcome.turn_budget_chars is not None:  # the policy's word for this call's turn
            self.total = max(min(self.total, outcome.turn_budget_chars), self._floor_total)
        self._answered += 1
        size = result_chars(outcome)
        unknown = max(0, self._calls - self._answered - len(known_later))
        reserve = unknown * min(PREVIEW_ROOM, self.total // max(self._calls, 1))
        later = [result_chars(other) for other in known_later]
        left = self.total - self.used
        room = size
        if size + sum(later) + reserve > left and self._shrinks_first(size, later, left, reserve):
            room = min(
                size, max(MIN_BUDGET, min(PREVIEW_ROOM, left - reserve - self._floor(later)))
            )
        # Counted before any wait: concurrent calls of the turn see this one's share taken.
        self.used += room
        if room < size:
            outcome = await shrink(outcome, room)
            self.used += result_chars(outcome) - room
        return outcome

    @staticmethod
    def _floor(sizes: Sequence[int]) -> int:
        return sum(min(size, PREVIEW_ROOM) for size in sizes)

    def _shrinks_first(self, size: int, later: list[int], left: int, reserve: int) -> bool:
        """Whether this result is among the largest that must be shrunk for the rest to fit."""
        excess = size + sum(later) + reserve - left
        for candidate, is_this in sorted(
            [(size, True), *((other, False) for other in later)], key=lambda pair: -pair[0]
        ):
            if is_this:
                return True
            excess -= max(0, candidate - PREVIEW_ROOM)
            if excess <= 0:
                return False
        return True


@dataclass
class _Opened:
    budget: TurnBudget
    expires: float


class TurnRegistry:
    """Turns named by single calls (ExecuteRequest.turn_id), per session, for `window_s`; a
    session keeps at most `per_session` (its oldest goes first: never another session's)."""

    def __init__(self, window_s: float = 60.0, per_session: int = 16) -> None:
        self._window_s = window_s
        self._per_session = per_session
        self._sessions: dict[str, dict[str, _Opened]] = {}
        self._next_sweep = 0.0

    def get(self, session_id: str, turn_id: str, open_turn: Callable[[], TurnBudget]) -> TurnBudget:
        """The turn's budget, opened now when it is new (or its window passed)."""
        now = time.monotonic()
        self._sweep(now)
        turns = self._sessions.setdefault(session_id, {})
        opened = turns.get(turn_id)
        if opened is None or opened.expires <= now:
            for old in [t for t, o in turns.items() if o.expires <= now]:
                del turns[old]
            if len(turns) >= self._per_session:
                del turns[min(turns, key=lambda t: turns[t].expires)]
            opened = turns[turn_id] = _Opened(open_turn(), now + self._window_s)
        return opened.budget

    def _sweep(self, now: float) -> None:
        """Now and then, forget sessions whose turns all ended (closed sessions among them)."""
        if now < self._next_sweep:
            return
        self._next_sweep = now + self._window_s
        for session_id in list(self._sessions):
            if all(o.expires <= now for o in self._sessions[session_id].values()):
                del self._sessions[session_id]
