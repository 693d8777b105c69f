"""A turn whose tool_use blocks arrive one by one (ExecuteTurn), run as a batch of them would be.

A model streams its answer; each tool_use block can start as soon as it is complete. Blocks are
grouped as they arrive exactly as `partition` groups a batch: consecutive concurrency-safe calls
(at most `max_parallel`) form a group, any other call is alone. A group starts once every call of
the groups before it is done, and a call that joins a running group starts at once. A failing
call that cancels its siblings (Bash) cancels the running calls of its group, and a call joining
that group afterwards is answered as not run, without running. Answers leave in arrival order,
each as soon as it and every call before it are done, under one turn budget.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from daemon.calls.pipeline import PreparedCall
from daemon.calls.turn_budget import Shrink, TurnBudget
from daemon.models import ExecuteOutcome

RunOne = Callable[[PreparedCall], Coroutine[Any, Any, ExecuteOutcome]]
SiblingCancelled = Callable[[PreparedCall, PreparedCall], ExecuteOutcome]
NotRun = Callable[[PreparedCall, PreparedCall | None], ExecuteOutcome]


@dataclass
class _Entry:
    call: PreparedCall
    group: int
    task: asyncio.Task[ExecuteOutcome] | None = None
    cancelled_by: PreparedCall | None = None
    not_run: ExecuteOutcome | None = None
    """The answer of a call that never started (its group had failed when it arrived)."""
    answered: bool = False
    """Its answer went out (and was let go: a long turn holds no answers it already sent)."""

    @property
    def finished(self) -> bool:
        """Done running, or never to run (its group had failed when it arrived)."""
        if self.answered:
            return True
        if self.task is None:
            return self.cancelled_by is not None
        return self.task.done()


class StreamingTurn:
    """The calls of one turn as they arrive, and their answers in order.

    Args:
        run_one: Runs one call (idempotency, slots, locks, the pipeline).
        shrink_for: How a call's answer is made to fit its turn.
        cancelled: The answer of a call cancelled because a sibling failed.
        not_run: The answer of a call that joined its group after a call of it had failed
            (it never starts; its answer is made, and audited, once); given no failed call,
            of one that never started because the turn was cancelled.
        max_parallel: Largest group of concurrency-safe calls.
        turn: The turn's budget.
    """

    def __init__(
        self,
        run_one: RunOne,
        shrink_for: Callable[[PreparedCall], Shrink],
        cancelled: SiblingCancelled,
        not_run: NotRun,
        max_parallel: int,
        turn: TurnBudget,
    ) -> None:
        self._run_one = run_one
        self._shrink_for = shrink_for
        self._cancelled = cancelled
        self._not_run = not_run
        self._max = max_parallel
        self._turn = turn
        self._entries: list[_Entry] = []
        self._group_sizes: list[int] = []
        self._group_safe: list[bool] = []
        self._failed: dict[int, PreparedCall] = {}
        self._ended = False
        self._abandoned = False
        self._error: BaseException | None = None
        self._changed = asyncio.Event()
        self._next = 0

    @property
    def calls(self) -> list[PreparedCall]:
        """The turn's calls so far, in arrival order."""
        return [entry.call for entry in self._entries]

    def add(self, call: PreparedCall) -> None:
        """A block of the turn, complete: it starts as soon as the rules allow."""
        last = len(self._group_sizes) - 1
        safe = call.concurrency_safe
        if safe and last >= 0 and self._group_safe[last] and self._group_sizes[last] < self._max:
            self._group_sizes[last] += 1
            group = last
        else:
            self._group_sizes.append(1)
            self._group_safe.append(safe)
            group = last + 1
        self._entries.append(_Entry(call, group))
        self._start_ready()
        self._changed.set()

    def end(self, error: BaseException | None = None) -> None:
        """No more blocks (`error`: the stream of blocks broke; answered calls still are)."""
        self._ended = True
        self._error = error
        self._changed.set()

    def cancel(self) -> None:
        """The caller went away: stop every call still running and start no other (attacker
        round 158: the calls after a cancelled one started as it ended, and ran to their end);
        each that never started is audited as not run."""
        self._abandoned = True
        for entry in self._entries:
            if entry.task is not None and not entry.task.done():
                entry.task.cancel()
            elif entry.task is None and entry.not_run is None and not entry.answered:
                entry.not_run = self._not_run(entry.call, None)

    def _start_ready(self) -> None:
        if self._abandoned:
            return
        for entry in self._entries:
            if entry.task is not None or entry.cancelled_by is not None or entry.answered:
                continue
            if any(not e.finished for e in self._entries if e.group < entry.group):
                break  # an earlier group still runs: this one, and every later one, waits
            failed = self._failed.get(entry.group)
            if failed is not None:
                entry.cancelled_by = failed
                entry.not_run = self._not_run(entry.call, failed)
                continue
            entry.task = asyncio.create_task(self._run_one(entry.call))
            entry.task.add_done_callback(functools.partial(self._done, entry))

    def _done(self, entry: _Entry, task: asyncio.Task[ExecuteOutcome]) -> None:
        if not task.cancelled() and task.exception() is None:
            failed = entry.call.cancels_siblings and task.result().result.is_error
            if failed and entry.group not in self._failed:
                self._failed[entry.group] = entry.call
                for other in self._entries:
                    running = other.task is not None and not other.task.done()
                    if other.group == entry.group and running and other.task is not None:
                        other.cancelled_by = entry.call
                        other.task.cancel()
        self._start_ready()
        self._changed.set()

    def _ready(self, entry: _Entry) -> ExecuteOutcome | None:
        """The entry's answer once it has one."""
        if entry.task is None:
            return entry.not_run
        if not entry.task.done():
            return None
        if entry.task.cancelled():
            if entry.cancelled_by is None:
                raise asyncio.CancelledError
            return self._cancelled(entry.call, entry.cancelled_by)
        return entry.task.result()

    async def answers(self) -> AsyncIterator[ExecuteOutcome]:
        """Every call's answer, in arrival order; ends once the turn ended and all answered."""
        while True:
            self._changed.clear()
            if self._next < len(self._entries):
                entry = self._entries[self._next]
                outcome = self._ready(entry)
                if outcome is not None:
                    self._next += 1
                    entry.answered, entry.task = True, None
                    known_later = [
                        later.task.result()
                        for later in self._entries[self._next :]
                        if later.task is not None and _answered(later.task)
                    ]
                    shrink = self._shrink_for(entry.call)
                    yield await self._turn.admit(outcome, shrink, known_later)
                    continue
            elif self._ended:
                if self._error is not None:
                    raise self._error
                return
            await self._changed.wait()


def _answered(task: asyncio.Task[ExecuteOutcome]) -> bool:
    return task.done() and not task.cancelled() and task.exception() is None
