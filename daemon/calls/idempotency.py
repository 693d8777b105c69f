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
import uuid
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
    """What remembering the answer costs: its text and image bytes, its tool_use id (in the key
    and the answer), and some overhead."""
    return (
        sum(
            len(b.text) if isinstance(b, TextContent) else len(b.data)
            for b in outcome.result.content
        )
        + 2 * len(outcome.result.tool_use_id)
        + 512
    )


def _not_again(tool_use_id: str, text: str, reason: str) -> ExecuteOutcome:
    return ExecuteOutcome(
        result=ToolResult(
            tool_use_id=tool_use_id, content=(TextContent(text=text),), is_error=True
        ),
        decision=Decision(outcome=None, reasons=(reason,), decision_id=uuid.uuid4().hex),
        report=ExecutionReport(),
    )


def cancelled_outcome(tool_use_id: str) -> ExecuteOutcome:
    """What a retry of a call that was cancelled mid-run is told (it is not run a second time)."""
    text = (
        "This tool call was cancelled before it finished; its effects may be partial. It is not "
        "run again under the same tool_use id: check the state, then issue a new call if needed."
    )
    return _not_again(tool_use_id, text, "cancelled")


def forgotten_outcome(tool_use_id: str) -> ExecuteOutcome:
    """What a retry of a call that ran, but whose answer could not be kept, is told."""
    text = (
        "This tool call already ran; its answer was too large to keep for a retry (or had to "
        "make room for others). It is not run again under the same tool_use id: check the "
        "state, then issue a new call if needed."
    )
    return _not_again(tool_use_id, text, "already ran, answer not kept")


class ResultCache:
    """Remembers answers by (principal, session, tool_use id).

    Running calls and finished answers are kept apart: finished ones in the order they finished,
    so expiry only ever looks at the oldest. Each principal has a share (entries and size); when
    a principal's share or the whole is full, the oldest answer of the principal holding the most
    goes first, so one principal's flood evicts its own answers, never another's.
    """

    def __init__(
        self,
        ttl_s: float = 600.0,
        max_entries: int = 2_000,
        max_chars: int = 32 << 20,
        *,
        max_entries_per_principal: int = 500,
        max_chars_per_principal: int = 8 << 20,
    ) -> None:
        self._ttl_s = ttl_s
        self._max_entries = max_entries
        self._max_chars = max_chars
        self._share_entries = max_entries_per_principal
        self._share_chars = max_chars_per_principal
        self._running: dict[Key, _Entry] = {}
        self._finished: OrderedDict[Key, _Entry] = OrderedDict()
        self._by_principal: dict[str, OrderedDict[Key, _Entry]] = {}
        self._chars_of: dict[str, int] = {}
        self._chars = 0
        self._ran: dict[str, OrderedDict[Key, tuple[str, float]]] = {}
        """By principal: calls whose answers had to go before their time (input hash, when they
        finished): a retry is told they ran, not run again. Each principal has its own bound, so
        nobody's flood pushes another's out."""
        self._max_ran = 4 * max_entries_per_principal

    def __len__(self) -> int:
        return len(self._running) + len(self._finished)

    def _drop(self, key: Key, *, remember_it_ran: bool = True) -> None:
        entry = self._finished.pop(key)
        if remember_it_ran and entry.finished_at is not None:
            ran = self._ran.setdefault(key[0], OrderedDict())
            ran[key] = (entry.input_hash, entry.finished_at)
            while len(ran) > self._max_ran:
                ran.popitem(last=False)
        principal = key[0]
        mine = self._by_principal[principal]
        del mine[key]
        self._chars -= entry.chars
        self._chars_of[principal] -= entry.chars
        if not mine:
            del self._by_principal[principal]
            del self._chars_of[principal]

    def _evict(self, now: float) -> None:
        while self._finished:
            key, oldest = next(iter(self._finished.items()))
            assert oldest.finished_at is not None
            if now - oldest.finished_at < self._ttl_s:
                break
            self._drop(key, remember_it_ran=False)
        for principal, ran in list(self._ran.items()):
            while ran and now - next(iter(ran.values()))[1] >= self._ttl_s:
                ran.popitem(last=False)
            if not ran:
                del self._ran[principal]
        while len(self._finished) > self._max_entries or self._chars > self._max_chars:
            largest = max(self._by_principal, key=lambda p: self._chars_of[p])
            self._drop(next(iter(self._by_principal[largest])))

    def _fit_share(self, principal: str) -> None:
        mine = self._by_principal.get(principal)
        while mine and (
            len(mine) > self._share_entries or self._chars_of[principal] > self._share_chars
        ):
            self._drop(next(iter(mine)))
            mine = self._by_principal.get(principal)

    def forget_session(self, session_id: str) -> None:
        """Drop a closed session's finished entries."""
        for key in [k for k in self._finished if k[1] == session_id]:
            self._drop(key, remember_it_ran=False)
        for ran in self._ran.values():
            for key in [k for k in ran if k[1] == session_id]:
                del ran[key]

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
        mine = self._ran.get(key[0])
        ran = mine.get(key) if mine is not None else None
        if ran is not None:
            if ran[0] != input_hash:
                raise RequestError(
                    f"tool_use id {key[2]!r} was already used in this session with a different "
                    "input; every tool_use needs its own id"
                )
            return forgotten_outcome(key[2]), True

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
            principal = key[0]
            self._by_principal.setdefault(principal, OrderedDict())[key] = entry
            self._chars_of[principal] = self._chars_of.get(principal, 0) + entry.chars
            self._fit_share(principal)
            self._evict(entry.finished_at)
