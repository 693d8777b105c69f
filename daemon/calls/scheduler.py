"""Scheduling tool calls: declared semantics decide what runs together, answers keep request order.

- A batch (one assistant turn) is cut into groups: consecutive concurrency-safe calls form one group
  that runs in parallel (up to a cap); every other call runs alone, after everything before it and
  before anything after it.
- Within a session, safe calls hold the session lock shared and every other call holds it
  exclusively, so an unsafe call never overlaps another call of its session, even one that arrived
  through a separate RPC. Different sessions never wait for each other.
- When a call of a parallel group whose tool cancels its siblings (Bash) fails, its still-running
  siblings are cancelled and answered with an error saying so; other failures leave siblings
  alone.
- In-flight calls are capped overall and per session; past the cap a call queues for a bounded time,
  then the caller gets RESOURCE_EXHAUSTED.
- Every call goes through the idempotency cache: a retried tool_use id never runs twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

from daemon.calls.idempotency import ResultCache, cancelled_outcome
from daemon.calls.locks import SharedExclusiveLock
from daemon.calls.pipeline import CallRequest, Pipeline, PreparedCall, ReadyCall, answered_call
from daemon.calls.streaming_turn import StreamingTurn
from daemon.calls.turn_budget import Shrink, TurnBudget, TurnRegistry
from daemon.errors import Overloaded
from daemon.models import (
    Caller,
    Decision,
    ExecuteOutcome,
    ExecutionReport,
    TextContent,
    ToolResult,
)
from daemon.tools.peers import Peers


@dataclass(frozen=True)
class SchedulerLimits:
    """Bounds of the scheduler."""

    max_parallel: int = 10
    """Largest parallel group of concurrency-safe calls."""
    max_in_flight: int = 64
    """Calls running at once, overall."""
    max_in_flight_per_session: int = 16
    """Calls running at once in one session."""
    max_in_flight_per_principal: int = 32
    """Calls running at once for one principal, over all its sessions: what is left of
    `max_in_flight` stays for the others."""
    admin_reserve: int = 8
    """Calls admin principals may run beyond `max_in_flight` once it is reached: tenants
    together, each within its share, never lock the operators out."""
    queue_timeout_s: float = 30.0
    """How long a call may wait for a slot before RESOURCE_EXHAUSTED."""
    turn_budget_chars: int = 200_000
    """What the results of one turn may hold together (the policy may lower it)."""


def input_hash(request: CallRequest) -> str:
    """What identifies a call's input for idempotency: its tool and canonical input hash."""
    return f"{request.tool_use.name}\0{request.input_sha256}"


async def _acquire(slots: asyncio.Semaphore, timeout_s: float, overloaded: str) -> None:
    """Take a slot, waiting at most `timeout_s`, else Overloaded with that message."""
    if not slots.locked():
        await slots.acquire()  # free: returns at once, no timer needed
        return
    try:
        async with asyncio.timeout(timeout_s):
            await slots.acquire()
    except TimeoutError:
        raise Overloaded(overloaded) from None


def partition(calls: list[PreparedCall], max_parallel: int) -> list[list[PreparedCall]]:
    """Consecutive safe calls form a group (at most `max_parallel`); any other call is alone."""
    groups: list[list[PreparedCall]] = []
    for call in calls:
        last = groups[-1] if groups else None
        if (
            call.concurrency_safe
            and last is not None
            and last[0].concurrency_safe
            and len(last) < max_parallel
        ):
            last.append(call)
        else:
            groups.append([call])
    return groups


def _sibling_cancelled(call: PreparedCall, failed: PreparedCall) -> ExecuteOutcome:
    failed_use = failed.request.tool_use
    text = (
        f"Cancelled: this call ran in parallel with {failed_use.name} call {failed_use.id}, "
        "which failed, so it was stopped before it finished. Fix the failing command first, "
        "then run this call again if it is still needed."
    )
    return _stopped(call, text, f"cancelled: a parallel {failed_use.name} call failed")


def _stopped(call: PreparedCall, text: str, reason: str) -> ExecuteOutcome:
    """The answer of a call a failed sibling stopped, or kept from starting."""
    return ExecuteOutcome(
        result=ToolResult(
            tool_use_id=call.request.tool_use.id, content=(TextContent(text=text),), is_error=True
        ),
        decision=Decision(outcome=None, reasons=(reason,)),
        report=ExecutionReport(),
    )


class Scheduler:
    """Runs single calls and batches under the session locks, caps and idempotency."""

    def __init__(
        self, pipeline: Pipeline, limits: SchedulerLimits, cache: ResultCache | None = None
    ) -> None:
        self._pipeline = pipeline
        self._limits = limits
        self._cache = cache or ResultCache()
        self._turns = TurnRegistry()
        self._global = asyncio.Semaphore(limits.max_in_flight)
        self._admins = asyncio.Semaphore(limits.admin_reserve)
        self._session_slots: dict[str, asyncio.Semaphore] = {}
        self._principal_slots: dict[str, asyncio.Semaphore] = {}
        self._locks: dict[str, SharedExclusiveLock] = {}
        self._running: dict[str, set[asyncio.Task[object]]] = {}
        self._in_flight = 0

    @property
    def in_flight(self) -> int:
        """Calls currently running."""
        return self._in_flight

    def lock_for(self, session_id: str) -> SharedExclusiveLock:
        """The session's lock (created on first use)."""
        return self._locks.setdefault(session_id, SharedExclusiveLock())

    def forget_session(self, session_id: str) -> None:
        """Drop a closed session's scheduling state."""
        lock = self._locks.get(session_id)
        if lock is not None and lock.idle:
            del self._locks[session_id]
        self._session_slots.pop(session_id, None)
        self._running.pop(session_id, None)
        self._cache.forget_session(session_id)

    @contextlib.asynccontextmanager
    async def _slot(self, session_id: str, caller: Caller) -> AsyncIterator[None]:
        """A slot of the session's, of its principal's and of the daemon's, taken in that
        order: a call waiting for its session's or its principal's share holds nothing of the
        others' (attacker round 98: one principal's calls took every slot of the daemon). An
        admin's call finding the daemon's slots taken takes one of the admins' own (round 99:
        two tenants together locked the admin out)."""
        limits, principal = self._limits, caller.principal
        session_slots = self._session_slots.get(session_id)
        if session_slots is None:
            session_slots = asyncio.Semaphore(limits.max_in_flight_per_session)
            self._session_slots[session_id] = session_slots
        principal_slots = self._principal_slots.get(principal)
        if principal_slots is None:
            # One per principal that ever called: principals are configured tokens and local
            # users, not something a caller makes up.
            principal_slots = asyncio.Semaphore(limits.max_in_flight_per_principal)
            self._principal_slots[principal] = principal_slots
        waited = f"and none finished within {limits.queue_timeout_s:g} s; retry later"
        async with contextlib.AsyncExitStack() as taken:
            for slots, overloaded in (
                (
                    session_slots,
                    f"this session is at its limit of {limits.max_in_flight_per_session} calls "
                    f"in flight {waited}",
                ),
                (
                    principal_slots,
                    "this principal is at its limit of "
                    f"{limits.max_in_flight_per_principal} calls in flight over its sessions "
                    f"{waited}",
                ),
            ):
                await _acquire(slots, limits.queue_timeout_s, overloaded)
                taken.callback(slots.release)
            # Chosen now, not before the waits above: the daemon's slots may have freed meanwhile.
            daemons = self._admins if caller.admin and self._global.locked() else self._global
            await _acquire(
                daemons,
                limits.queue_timeout_s,
                f"tooljail is at its limit of {limits.max_in_flight} calls in flight {waited}",
            )
            taken.callback(daemons.release)
            self._in_flight += 1
            try:
                yield
            finally:
                self._in_flight -= 1

    @contextlib.contextmanager
    def _tracked(self, session_id: str, task: asyncio.Task[Any]) -> Iterator[None]:
        """Register a running call's task, so closing its session can cancel it."""
        running = self._running.setdefault(session_id, set())
        running.add(task)
        try:
            yield
        finally:
            running.discard(task)

    def has_running(self, session_id: str) -> bool:
        """Whether a call of the session is running."""
        return any(not t.done() for t in self._running.get(session_id, ()))

    async def cancel_session(self, session_id: str) -> int:
        """Cancel every running call of a session and wait until each has ended (a sandboxed
        call's container is gone then); returns how many were cancelled."""
        tasks = [t for t in self._running.pop(session_id, set()) if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            # Not `gather`: waiting must not end at the first call that fails.
            await asyncio.wait(tasks)
        return len(tasks)

    async def _run(self, call: PreparedCall, caller: Caller) -> ExecuteOutcome:
        """One call: idempotency, slot, session lock (shared if safe), then the pipeline."""
        if call.session.closed:
            # The rest of a batch whose session was closed: the pipeline answers (and audits)
            # that nothing ran, and nothing of the session (slots, lock) is made again.
            return await self._pipeline.run(call, caller)

        owner = started = False

        async def in_pipeline() -> ExecuteOutcome:
            nonlocal started
            started = True  # from here on the pipeline writes its answered record
            return await self._pipeline.run(call, caller)

        async def run_now() -> ExecuteOutcome:
            nonlocal owner
            owner = True  # not a retry waiting for the same call: this one runs it
            async with (
                self._slot(call.session.id, caller),
                self.lock_for(call.session.id).hold(exclusive=not call.concurrency_safe),
            ):
                # The call runs in a task of its own, which closing the session cancels: the
                # caller's RPC is not cancelled with it and still gets an answer saying so.
                # (Queued calls find the session closed once they get here: see
                # Session.pinned_root, which the pipeline checks first.)
                inner = asyncio.create_task(in_pipeline())
                with self._tracked(call.session.id, inner):
                    try:
                        return await inner
                    except asyncio.CancelledError:
                        current = asyncio.current_task()
                        if inner.cancelled() and current is not None and not current.cancelling():
                            if not started:
                                why = "its session was closed before it ran"
                                self._pipeline.audit_not_run(call, caller, why)
                            return cancelled_outcome(call.request.tool_use.id)
                        raise

        key = (caller.principal, call.session.id, call.request.tool_use.id)
        try:
            outcome, replayed = await self._cache.run_once(key, input_hash(call.request), run_now)
        except (asyncio.CancelledError, Overloaded) as exc:
            # Cancelled, or refused, while it waited for its slot or its session's lock: the
            # pipeline never had it, and it still gets its record (attacker round 158). A retry
            # that waited for the same call running has that call's answer; its own end is a
            # replay's record, not a second answer.
            if not owner:
                self._pipeline.audit_replay_cancelled(call, caller)
            elif not started:
                why = (
                    "cancelled while it waited to run"
                    if isinstance(exc, asyncio.CancelledError)
                    else f"refused: {exc}"
                )
                self._pipeline.audit_not_run(call, caller, why)
            raise
        if replayed:
            report = outcome.report.model_copy(update={"replayed": True})
            outcome = outcome.model_copy(update={"report": report})
            self._pipeline.audit_replay(call, caller, outcome)
        return outcome

    async def execute(self, request: CallRequest, caller: Caller) -> ExecuteOutcome:
        """A single call (an Execute RPC); one that names a turn shares its turn's budget."""
        call = await self._pipeline.prepare_off_loop(request, caller)
        outcome = await self._run(call, caller)
        if not request.turn_id:
            return outcome
        turn = self._turns.get(
            call.session.id,
            request.turn_id,
            lambda: TurnBudget(self._limits.turn_budget_chars, 0),
        )
        return await turn.admit(outcome, self._shrink_for(call))

    def streaming_turn(self, caller: Caller) -> StreamingTurn:
        """A turn whose calls arrive one by one (ExecuteTurn), scheduled as a batch is."""
        return StreamingTurn(
            functools.partial(self._run, caller=caller),
            self._shrink_for,
            _sibling_cancelled,
            functools.partial(self._not_run_after, caller=caller),
            self._limits.max_parallel,
            TurnBudget(self._limits.turn_budget_chars, 0),
        )

    def _not_run_after(
        self, call: PreparedCall, failed: PreparedCall | None, caller: Caller
    ) -> ExecuteOutcome:
        """The answer of a call of a turn that arrived when a call of its group had failed: it
        is not run (as a sibling of that call would have been stopped), and says so. Without
        `failed`: its turn was cancelled before it started (the answer reaches nobody)."""
        if failed is None:
            self._pipeline.audit_not_run(call, caller, "its turn was cancelled before it started")
            return cancelled_outcome(call.request.tool_use.id)
        failed_use = failed.request.tool_use
        self._pipeline.audit_not_run(
            call, caller, f"the {failed_use.name} call {failed_use.id} of its group had failed"
        )
        text = (
            f"Not run: the {failed_use.name} call {failed_use.id} of this turn, which this call "
            "would have run beside, had failed when it arrived. Fix the failing command first, "
            "then run this call again if it is still needed."
        )
        return _stopped(call, text, f"not run: a parallel {failed_use.name} call had failed")

    def _shrink_for(self, call: PreparedCall) -> Shrink:
        return functools.partial(self._pipeline.fit_turn, call)

    async def execute_batch(
        self, requests: list[CallRequest], caller: Caller
    ) -> AsyncGenerator[ExecuteOutcome, None]:
        """The calls of one assistant turn; answers in request order, each as soon as it and
        every call before it are done."""
        calls: list[PreparedCall] = []
        held: list[ExecuteOutcome] = []
        handed: set[int] = set()
        try:
            for request in requests:
                calls.append(await self._pipeline.prepare_off_loop(request, caller))
                await asyncio.sleep(0)  # checking a call can take milliseconds: let others in
            async for outcome in self._batch_answers(calls, caller, handed):
                if held:
                    yield held[-1]
                held.append(outcome)
        finally:
            # The batch ended early (the caller went away, a later call could not be checked):
            # its calls that never started still get their answered record (round 158).
            for call in calls:
                if id(call) not in handed:
                    why = "its batch ended before it started"
                    self._pipeline.audit_not_run(call, caller, why)
        if held:
            # The last answer waits for the PostToolBatch hooks and carries what they said.
            notes = await self._pipeline.batch_hooks.after(
                calls[0].session, caller, [answered_call(c) for c in calls], held
            )
            yield self._pipeline.batch_hooks.attach(held[-1], notes)

    async def _batch_answers(
        self, calls: list[PreparedCall], caller: Caller, handed: set[int]
    ) -> AsyncIterator[ExecuteOutcome]:
        """The answers of `calls`, group by group; `handed` gets the id of each call as it is
        handed to `_run` (which answers and audits it from then on)."""
        turn = TurnBudget(self._limits.turn_budget_chars, len(calls))
        for group in partition(calls, self._limits.max_parallel):
            handed.update(id(call) for call in group)
            if len(group) == 1:
                yield await turn.admit(
                    await self._run(group[0], caller), self._shrink_for(group[0])
                )
                continue
            async for outcome in self._run_parallel(group, caller, turn):
                yield outcome

    async def _run_parallel(
        self, group: list[PreparedCall], caller: Caller, turn: TurnBudget
    ) -> AsyncIterator[ExecuteOutcome]:
        group, peers = _with_peers(group)
        tasks = [asyncio.create_task(self._run(call, caller)) for call in group]
        cancelled_by: dict[int, PreparedCall] = {}

        def on_done(index: int, task: asyncio.Task[ExecuteOutcome]) -> None:
            call = group[index]
            if peers is not None:
                peers.leave(index)
            if task.cancelled() or task.exception() is not None:
                return
            if call.cancels_siblings and task.result().result.is_error:
                for other, sibling in enumerate(tasks):
                    if not sibling.done() and other not in cancelled_by:
                        cancelled_by[other] = call
                        sibling.cancel()

        for index, task in enumerate(tasks):
            task.add_done_callback(functools.partial(on_done, index))
        try:
            for index, task in enumerate(tasks):
                try:
                    outcome = await asyncio.shield(task)
                except asyncio.CancelledError:
                    if index not in cancelled_by or not task.cancelled():
                        raise  # the caller itself was cancelled
                    outcome = _sibling_cancelled(group[index], cancelled_by[index])
                known_later = [
                    later.result()
                    for later in tasks[index + 1 :]
                    if later.done() and not later.cancelled() and later.exception() is None
                ]
                yield await turn.admit(outcome, self._shrink_for(group[index]), known_later)
        finally:
            for task in _pending(tasks):
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


def _with_peers(group: list[PreparedCall]) -> tuple[list[PreparedCall], Peers | None]:
    """The group with its calls that may share work joined as peers, when there are at least
    two of them."""
    sharing = [index for index, call in enumerate(group) if call.shares_work]
    if len(sharing) < 2:
        return group, None
    peers = Peers(sharing)
    joined = [
        dataclasses.replace(call, peers=peers.handle(index))
        if isinstance(call, ReadyCall) and index in sharing
        else call
        for index, call in enumerate(group)
    ]
    return joined, peers


def _pending(tasks: list[asyncio.Task[ExecuteOutcome]]) -> Iterator[asyncio.Task[ExecuteOutcome]]:
    return (task for task in tasks if not task.done())
