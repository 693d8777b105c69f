"""Idempotency on the tool_use id: a tool call is never run twice by accident.

A retried call (same principal, same session, same tool_use id, same input) that arrives while
the first is running waits for it and gets the same answer; one that arrives after a call that
ran gets the remembered answer, marked as replayed (and audited as a replay), for a configurable
time. Another principal sending the same id is another call. Answers of calls that did not run
(refused, asking for approval, invalid) are not remembered: sending the same tool_use again with
an approval token must be decided afresh. The same id with a different input is a request error.
Memory is bounded by entry count and by the total characters remembered.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from daemon.errors import RequestError
from daemon.models import (
    Decision,
    ExecuteOutcome,
    ExecutionReport,
    Outcome,
    TextContent,
    ToolResult,
)

Key = tuple[str, str, str]
"""(principal, session id, tool_use id): another principal's same id is another call."""


@dataclass
class _Entry:
    input_hash: str
    future: asyncio.Future[ExecuteOutcome]
    finished_at: float | None = None
    chars: int = 0


def _size(outcome: ExecuteOutcome) -> int:
    return sum(len(b.text) for b in outcome.result.content if isinstance(b, TextContent)) + 512


def cancelled_outcome(tool_use_id: str) -> ExecuteOutcome:
    """What a retry of a call that was cancelled mid-run is told (it is not run a second time)."""
    text = (
        "This tool call was cancelled before it finished; its effects may be partial. It is not "
        "run again under the same tool_use id: check the state, then issue a new call if needed."
    )
    return ExecuteOutcome(
        result=ToolResult(
            tool_use_id=tool_use_id, content=(TextContent(text=text),), is_error=True
        ),
        decision=Decision(outcome=None, reasons=("cancelled",)),
        report=ExecutionReport(),
    )


class ResultCache:
    """Remembers answers by (principal, session, tool_use id).

    Running calls and finished answers are kept apart: finished ones in the order they finished,
    so expiry and the size bounds only ever look at the oldest (constant work per call, however
    many answers are remembered).
    """

    def __init__(self, ttl_s: float = 600.0, max_entries: int = 2_000, max_chars: int = 32 << 20):
        self._ttl_s = ttl_s
        self._max_entries = max_entries
        self._max_chars = max_chars
        self._running: dict[Key, _Entry] = {}
        self._finished: OrderedDict[Key, _Entry] = OrderedDict()
        self._chars = 0

    def __len__(self) -> int:
        return len(self._running) + len(self._finished)

    def _evict(self, now: float) -> None:
        while self._finished:
            key, oldest = next(iter(self._finished.items()))
            over = len(self._finished) > self._max_entries or self._chars > self._max_chars
            assert oldest.finished_at is not None
            if not over and now - oldest.finished_at < self._ttl_s:
                return
            del self._finished[key]
            self._chars -= oldest.chars

    def forget_session(self, session_id: str) -> None:
        """Drop a closed session's finished entries."""
        for key in [k for k in self._finished if k[1] == session_id]:
            self._chars -= self._finished.pop(key).chars

    async def run_once(
        self,
        key: Key,
        input_hash: str,
        run: Callable[[], Awaitable[ExecuteOutcome]],
    ) -> tuple[ExecuteOutcome, bool]:
        """The call's answer and whether it was replayed rather than run now."""
        self._evict(time.monotonic())
        entry = self._running.get(key) or self._finished.get(key)
        if entry is not None:
            if entry.input_hash != input_hash:
                raise RequestError(
                    f"tool_use id {key[2]!r} was already used in this session with a different "
                    "input; every tool_use needs its own id"
                )
            return await asyncio.shield(entry.future), True

        future: asyncio.Future[ExecuteOutcome] = asyncio.get_running_loop().create_future()
        entry = _Entry(input_hash=input_hash, future=future)
        self._running[key] = entry
        try:
            outcome = await run()
        except asyncio.CancelledError:
            self._settle(key, entry, cancelled_outcome(key[2]), remember=True)
            raise
        except BaseException as exc:
            # Not remembered: the caller got an error status, nothing was answered to the model.
            del self._running[key]
            future.set_exception(exc)
            future.exception()  # mark retrieved: waiters re-raise it themselves
            raise
        self._settle(key, entry, outcome, remember=outcome.decision.outcome is Outcome.ALLOW)
        return outcome, False

    def _settle(self, key: Key, entry: _Entry, outcome: ExecuteOutcome, *, remember: bool) -> None:
        del self._running[key]
        if not entry.future.done():
            entry.future.set_result(outcome)
        if remember:
            entry.finished_at = time.monotonic()
            entry.chars = _size(outcome)
            self._chars += entry.chars
            self._finished[key] = entry
