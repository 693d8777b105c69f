"""Idempotency on the tool_use id: a tool call is never run twice by accident.

A retried call (same session, same tool_use id, same input) that arrives while the first is
running waits for it and gets the same answer; one that arrives after a call that ran gets the
remembered answer, marked as replayed, for a configurable time. Answers of calls that did not run
(refused, asking for approval, invalid) are not remembered: sending the same tool_use again with an
approval token must be decided afresh. The same id with a different input is a request
error. Memory is bounded by entry count and by the total characters remembered.
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

Key = tuple[str, str]
"""(session id, tool_use id)."""


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
    """Remembers answers by (session, tool_use id)."""

    def __init__(self, ttl_s: float = 600.0, max_entries: int = 2_000, max_chars: int = 32 << 20):
        self._ttl_s = ttl_s
        self._max_entries = max_entries
        self._max_chars = max_chars
        self._entries: OrderedDict[Key, _Entry] = OrderedDict()
        self._chars = 0

    def __len__(self) -> int:
        return len(self._entries)

    def _evict(self, now: float) -> None:
        for key in list(self._entries):
            entry = self._entries[key]
            if entry.finished_at is None:
                continue  # never forget a call that is still running
            over = len(self._entries) > self._max_entries or self._chars > self._max_chars
            if not over and now - entry.finished_at < self._ttl_s:
                continue
            del self._entries[key]
            self._chars -= entry.chars

    def forget_session(self, session_id: str) -> None:
        """Drop a closed session's finished entries."""
        for key in [k for k, e in self._entries.items() if k[0] == session_id and e.finished_at]:
            self._chars -= self._entries.pop(key).chars

    async def run_once(
        self,
        key: Key,
        input_hash: str,
        run: Callable[[], Awaitable[ExecuteOutcome]],
    ) -> tuple[ExecuteOutcome, bool]:
        """The call's answer and whether it was replayed rather than run now."""
        now = time.monotonic()
        self._evict(now)
        entry = self._entries.get(key)
        if entry is not None:
            if entry.input_hash != input_hash:
                raise RequestError(
                    f"tool_use id {key[1]!r} was already used in this session with a different "
                    "input; every tool_use needs its own id"
                )
            self._entries.move_to_end(key)
            return await asyncio.shield(entry.future), True

        future: asyncio.Future[ExecuteOutcome] = asyncio.get_running_loop().create_future()
        entry = _Entry(input_hash=input_hash, future=future)
        self._entries[key] = entry
        try:
            outcome = await run()
        except asyncio.CancelledError:
            self._settle(entry, cancelled_outcome(key[1]))
            raise
        except BaseException as exc:
            # Not remembered: the caller got an error status, nothing was answered to the model.
            del self._entries[key]
            future.set_exception(exc)
            future.exception()  # mark retrieved: waiters re-raise it themselves
            raise
        self._settle(entry, outcome)
        if outcome.decision.outcome is not Outcome.ALLOW:
            self._forget(key, entry)
        return outcome, False

    def _forget(self, key: Key, entry: _Entry) -> None:
        if self._entries.get(key) is entry:
            del self._entries[key]
            self._chars -= entry.chars

    def _settle(self, entry: _Entry, outcome: ExecuteOutcome) -> None:
        entry.finished_at = time.monotonic()
        entry.chars = _size(outcome)
        self._chars += entry.chars
        if not entry.future.done():
            entry.future.set_result(outcome)
