"""Scheduling: declared semantics decide what runs together; answers keep request order."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import Field

from daemon.calls.audit import AuditLog
from daemon.calls.pipeline import CallRequest, Pipeline, PipelineLimits
from daemon.calls.scheduler import Scheduler, SchedulerLimits, partition
from daemon.errors import Overloaded, RequestError
from daemon.host.pinned import PinnedDirectory
from daemon.models import Caller, Outcome, ToolUse
from daemon.policy.engine import PolicyEngine
from daemon.policy.verdict import Verdict
from daemon.sessions.session import Session
from daemon.sessions.store import SessionStore
from daemon.tools.contract import (
    CallContext,
    CallFacts,
    InterruptBehavior,
    Tool,
    ToolInput,
    ToolOutput,
    ToolTraits,
)
from daemon.tools.registry import ToolRegistry
from sandbox.backend import SandboxLimits
from sandbox.limits import SandboxCeilings

#: (tool_use id, start, end) of every call that ran, across tools.
SPANS: list[tuple[str, float, float]] = []


class StepInput(ToolInput):
    seconds: float = Field(default=0.0, ge=0)
    fail: bool = False
    safe: bool = True


class _Step(Tool[StepInput, str]):
    description: ClassVar[str] = "test step"
    input_model = StepInput

    def analyse(self, args: StepInput, session: Session) -> CallFacts:
        return self.facts(concurrency_safe=self.traits.concurrency_safe and args.safe)

    async def call(self, args: StepInput, ctx: CallContext) -> str:
        start = time.monotonic()
        try:
            await asyncio.sleep(args.seconds)
        finally:
            SPANS.append((ctx.tool_use_id, start, time.monotonic()))
        return "failed" if args.fail else "done"

    def render(self, result: str) -> ToolOutput:
        return ToolOutput.text(result, is_error=result == "failed")


class SafeStep(_Step):
    name: ClassVar[str] = "Safe"
    traits = ToolTraits(
        read_only=True, concurrency_safe=True, sandboxed=False, interrupt=InterruptBehavior.CANCEL
    )


class UnsafeStep(_Step):
    name: ClassVar[str] = "Unsafe"
    traits = ToolTraits(sandboxed=False)


class CrashingStep(_Step):
    """Its analysis fails unexpectedly (as Glob's brace expansion once did on nested braces)."""

    name: ClassVar[str] = "Crashing"
    traits = ToolTraits(read_only=True, concurrency_safe=True, sandboxed=False)

    def analyse(self, args: StepInput, session: Session) -> CallFacts:
        raise RecursionError("maximum recursion depth exceeded")


class ShareInput(ToolInput):
    key: str


#: tool_use id -> the items of the cohort its call joined (None: it had no peers).
COHORTS: dict[str, tuple[str, ...] | None] = {}


class SharingStep(Tool[ShareInput, str]):
    """Joins its parallel siblings, like Grep, and records the cohort it ends up in."""

    name: ClassVar[str] = "Sharing"
    description: ClassVar[str] = "test sharing"
    input_model = ShareInput
    traits = ToolTraits(
        read_only=True,
        concurrency_safe=True,
        sandboxed=False,
        interrupt=InterruptBehavior.CANCEL,
        shares_work=True,
    )

    async def call(self, args: ShareInput, ctx: CallContext) -> str:
        if ctx.peers is None:
            COHORTS[ctx.tool_use_id] = None
            return "alone"
        cohort, _ = await ctx.peers.join(args.key, ctx.tool_use_id)
        COHORTS[ctx.tool_use_id] = cohort.items
        return "joined"

    def render(self, result: str) -> ToolOutput:
        return ToolOutput.text(result)


class FakeBash(_Step):
    """Safe when its input says so, like a read-only shell command."""

    name: ClassVar[str] = "Bash"
    traits = ToolTraits(
        concurrency_safe=True,
        sandboxed=False,
        interrupt=InterruptBehavior.CANCEL,
        cancels_siblings=True,
    )


class AllowAll(PolicyEngine):
    async def decide(self, document: dict[str, Any]) -> Verdict:
        return Verdict(Outcome.ALLOW, (), SandboxLimits(), None)

    async def visible_tools(self, document: dict[str, Any]) -> frozenset[str] | None:
        return frozenset({"Safe", "Unsafe", "Bash"})

    @property
    def revision(self) -> str:
        return "test"


@pytest.fixture
def audit(tmp_path: Path) -> Iterator[AuditLog]:
    log = AuditLog(str(tmp_path / "audit.jsonl"))
    yield log
    log.close()


def make_scheduler(tmp_path: Path, audit: AuditLog, **limits: Any) -> Scheduler:
    sessions = SessionStore(tmp_path / "ws")
    sessions._sessions["other"] = Session(
        id="other", workspace=(tmp_path / "ws").resolve(), owner=Caller().principal
    )
    pipeline = Pipeline(
        registry=ToolRegistry(
            [SafeStep(), UnsafeStep(), FakeBash(), SharingStep(), CrashingStep()]
        ),
        policy=AllowAll(),
        sessions=sessions,
        limits=PipelineLimits(50_000, SandboxLimits(), SandboxCeilings()),
        audit=audit,
    )
    return Scheduler(pipeline, SchedulerLimits(**limits))


def req(tool_id: str, name: str = "Safe", session: str = "", **tool_input: Any) -> CallRequest:
    return CallRequest(ToolUse(id=tool_id, name=name, input=tool_input), session_id=session)


def span(tool_id: str) -> tuple[float, float]:
    matches = [(s, e) for i, s, e in SPANS if i == tool_id]
    assert len(matches) == 1, f"{tool_id} ran {len(matches)} times"
    return matches[0]


def overlap(a: str, b: str) -> bool:
    (s1, e1), (s2, e2) = span(a), span(b)
    return s1 < e2 and s2 < e1


async def collect(scheduler: Scheduler, requests: list[CallRequest]) -> list[Any]:
    return [o async for o in scheduler.execute_batch(requests, Caller())]


@pytest.fixture(autouse=True)
def _clear_spans() -> None:
    SPANS.clear()


async def test_parallel_siblings_that_share_work_meet_as_peers(
    tmp_path: Path, audit: AuditLog
) -> None:
    COHORTS.clear()
    scheduler = make_scheduler(tmp_path, audit)
    requests = [
        req("s1", "Sharing", key="tree"),
        req("s2", "Safe"),
        req("s3", "Sharing", key="tree"),
        req("s4", "Sharing", key="elsewhere"),
        req("u1", "Unsafe"),
        req("s5", "Sharing", key="tree"),  # a group of its own after the unsafe call
    ]
    outcomes = await collect(scheduler, requests)
    assert [o.result.tool_use_id for o in outcomes] == [r.tool_use.id for r in requests]
    assert COHORTS == {
        "s1": ("s1", "s3"),
        "s3": ("s1", "s3"),
        "s4": ("s4",),
        "s5": None,
    }
    COHORTS.clear()
    await scheduler.execute(req("s6", "Sharing", key="tree"), Caller())
    assert COHORTS == {"s6": None}


async def test_partition_groups_consecutive_safe_calls(tmp_path: Path, audit: AuditLog) -> None:
    scheduler = make_scheduler(tmp_path, audit)
    pipeline = scheduler._pipeline
    calls = [
        await pipeline.prepare_off_loop(r, Caller())
        for r in [
            req("a"),
            req("b"),
            req("c", "Unsafe"),
            req("d"),
            req("e", "Safe", colour="bad"),  # fails validation: not safe
            req("f"),
            req("g", "Bash", safe=False),
        ]
    ]
    groups = partition(calls, max_parallel=10)
    assert [[c.request.tool_use.id for c in g] for g in groups] == [
        ["a", "b"], ["c"], ["d"], ["e"], ["f"], ["g"]
    ]  # fmt: skip
    capped = partition(
        [await pipeline.prepare_off_loop(req(str(i)), Caller()) for i in range(25)], max_parallel=10
    )
    assert [len(g) for g in capped] == [10, 10, 5]


async def test_safe_calls_overlap_and_unsafe_calls_run_alone(
    tmp_path: Path, audit: AuditLog
) -> None:
    scheduler = make_scheduler(tmp_path, audit)
    requests = [
        req("s1", seconds=0.2),
        req("s2", seconds=0.2),
        req("s3", seconds=0.2),
        req("u1", "Unsafe", seconds=0.05),
        req("s4", seconds=0.05),
    ]
    outcomes = await collect(scheduler, requests)
    assert [o.result.tool_use_id for o in outcomes] == ["s1", "s2", "s3", "u1", "s4"]
    assert overlap("s1", "s2") and overlap("s2", "s3") and overlap("s1", "s3")
    for other in ("s1", "s2", "s3", "s4"):
        assert not overlap("u1", other)
    assert span("u1")[0] >= max(span(i)[1] for i in ("s1", "s2", "s3"))
    assert span("s4")[0] >= span("u1")[1]


async def test_unsafe_call_is_exclusive_across_separate_rpcs(
    tmp_path: Path, audit: AuditLog
) -> None:
    scheduler = make_scheduler(tmp_path, audit)
    calls = [
        scheduler.execute(req("r1", seconds=0.15), Caller()),
        scheduler.execute(req("w1", "Unsafe", seconds=0.1), Caller()),
        scheduler.execute(req("r2", seconds=0.15), Caller()),
        scheduler.execute(req("x1", "Unsafe", seconds=0.1, session="other"), Caller()),
    ]
    await asyncio.gather(*calls)
    assert not overlap("w1", "r1") and not overlap("w1", "r2")
    assert overlap("x1", "w1") or overlap("x1", "r1"), "another session must not wait"


async def test_failing_bash_cancels_its_running_siblings(tmp_path: Path, audit: AuditLog) -> None:
    scheduler = make_scheduler(tmp_path, audit)
    outcomes = await collect(
        scheduler,
        [
            req("slow", seconds=60),
            req("bash", "Bash", seconds=0.05, fail=True),
            req("quick", seconds=0.0),
        ],
    )
    slow, bash, quick = outcomes
    assert bash.result.is_error and bash.result.text() == "failed"
    assert slow.result.is_error and "parallel" in slow.result.text()
    assert "bash" in slow.result.text()
    assert not quick.result.is_error
    slow_start, slow_end = span("slow")
    assert slow_end - slow_start < 60, "the slow sibling ran to its end"


def _answered_ids(tmp_path: Path) -> list[str]:
    lines = (tmp_path / "audit.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    return [r["tool_use_id"] for r in records if r["event"] == "answered"]


async def test_every_call_of_a_batch_has_one_answered_record_cancelled_or_not(
    tmp_path: Path, audit: AuditLog
) -> None:
    """A sibling cancelled while it waited for its slot never reached the pipeline: it had no
    answered record (attacker round 154's lead)."""
    scheduler = make_scheduler(tmp_path, audit, max_parallel=10, max_in_flight_per_principal=2)
    ids = ["slow", "bash", "waiting1", "waiting2"]
    await collect(
        scheduler,
        [
            req("slow", seconds=60),
            req("bash", "Bash", seconds=0.05, fail=True),
            req("waiting1", seconds=0.0),
            req("waiting2", seconds=0.0),
        ],
    )
    assert sorted(_answered_ids(tmp_path)) == sorted(ids)


async def test_a_call_joining_a_failed_group_of_a_turn_is_answered_and_audited_as_not_run(
    tmp_path: Path, audit: AuditLog
) -> None:
    """Attacker round 154: a call sent after its group's Bash had failed was told it "ran in
    parallel" and "was stopped before it finished", and had no audit record."""
    scheduler = make_scheduler(tmp_path, audit)
    turn = scheduler.streaming_turn(Caller())
    pipeline = scheduler._pipeline
    answers = turn.answers()
    turn.add(await pipeline.prepare_off_loop(req("bash", "Bash", seconds=0.0, fail=True), Caller()))
    first = await anext(answers)
    assert first.result.text() == "failed"
    turn.add(await pipeline.prepare_off_loop(req("late", seconds=0.0), Caller()))
    turn.end()
    late = await anext(answers)
    assert late.result.is_error
    assert late.result.text().startswith("Not run:") and "parallel" not in late.result.text()
    assert "late" not in [i for i, _, _ in SPANS]
    assert _answered_ids(tmp_path) == ["bash", "late"]


async def test_other_failures_leave_siblings_alone(tmp_path: Path, audit: AuditLog) -> None:
    scheduler = make_scheduler(tmp_path, audit)
    outcomes = await collect(
        scheduler, [req("slow", seconds=0.3), req("bad", fail=True, seconds=0.01)]
    )
    assert not outcomes[0].result.is_error and outcomes[0].result.text() == "done"
    assert outcomes[1].result.is_error


async def test_retried_call_runs_once_and_is_replayed(tmp_path: Path, audit: AuditLog) -> None:
    scheduler = make_scheduler(tmp_path, audit)
    first, second = await asyncio.gather(
        scheduler.execute(req("same", "Unsafe", seconds=0.1), Caller()),
        scheduler.execute(req("same", "Unsafe", seconds=0.1), Caller()),
    )
    third = await scheduler.execute(req("same", "Unsafe", seconds=0.1), Caller())
    span("same")  # ran exactly once
    assert [first.report.replayed, second.report.replayed, third.report.replayed] == [
        False,
        True,
        True,
    ]
    assert first.result == second.result == third.result
    with pytest.raises(RequestError, match="different input"):
        await scheduler.execute(req("same", "Unsafe", seconds=0.2), Caller())


async def test_overload_answers_resource_exhausted(tmp_path: Path, audit: AuditLog) -> None:
    """And the refused call is audited as not run (attacker round 158: it had no record)."""
    scheduler = make_scheduler(tmp_path, audit, max_in_flight=1, queue_timeout_s=0.1)
    blocker = asyncio.create_task(scheduler.execute(req("long", seconds=1.0), Caller()))
    await asyncio.sleep(0.05)
    with pytest.raises(Overloaded):
        await scheduler.execute(req("late"), Caller())
    await blocker
    assert scheduler.in_flight == 0
    (record,) = _records(tmp_path, "late")
    assert record["event"] == "answered" and record["not_run"].startswith("refused")


def _records(tmp_path: Path, tool_use_id: str) -> list[dict[str, Any]]:
    lines = (tmp_path / "audit.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["tool_use_id"] == tool_use_id]


async def test_a_cancelled_retry_of_a_running_call_adds_no_answer_of_its_own(
    tmp_path: Path, audit: AuditLog
) -> None:
    """Attacker round 158: a retry waiting for the same call, cancelled, wrote an answered
    record (not run) before the call's own answer: one call, two answers."""
    scheduler = make_scheduler(tmp_path, audit)
    first = asyncio.create_task(scheduler.execute(req("same", "Unsafe", seconds=0.3), Caller()))
    while not scheduler._cache._running:  # the first is running: the retry will wait for it
        await asyncio.sleep(0.01)
    retry = asyncio.create_task(scheduler.execute(req("same", "Unsafe", seconds=0.3), Caller()))
    await asyncio.sleep(0.05)
    retry.cancel()
    await first
    events = [(r["event"], r.get("cancelled", False)) for r in _records(tmp_path, "same")]
    assert (
        events.count(("answered", False)) == 1
        and len([e for e in events if e[0] == "answered"]) == 1
    ), events
    assert ("replayed", True) in events


async def test_every_call_of_a_cancelled_batch_has_one_answered_record(
    tmp_path: Path, audit: AuditLog
) -> None:
    """Attacker round 158: a batch cancelled during its first call left the calls after it with
    no record at all."""
    scheduler = make_scheduler(tmp_path, audit)
    requests = [req("b1", "Unsafe", seconds=5), req("b2", "Unsafe"), req("b3", "Unsafe")]
    batch = asyncio.create_task(collect(scheduler, requests))
    await asyncio.sleep(0.2)
    batch.cancel()
    with pytest.raises(asyncio.CancelledError):
        await batch
    assert sorted(_answered_ids(tmp_path)) == ["b1", "b2", "b3"]
    assert [r["not_run"] for r in _records(tmp_path, "b2")] == ["its batch ended before it started"]


async def test_a_cancelled_turn_starts_nothing_more_and_audits_what_never_started(
    tmp_path: Path, audit: AuditLog
) -> None:
    """Attacker round 158: cancelling an ExecuteTurn stream let its later calls start after the
    cancel and run to their end."""
    scheduler = make_scheduler(tmp_path, audit)
    pipeline = scheduler._pipeline
    turn = scheduler.streaming_turn(Caller())
    turn.add(await pipeline.prepare_off_loop(req("t1", "Unsafe", seconds=0.5), Caller()))
    turn.add(await pipeline.prepare_off_loop(req("t2", "Unsafe", seconds=0.0), Caller()))
    await asyncio.sleep(0.2)
    turn.cancel()
    await asyncio.sleep(1.0)  # t1 ends (an unsafe step finishes when interrupted)
    assert [i for i, _, _ in SPANS if i == "t2"] == [], "t2 started after the turn was cancelled"
    assert sorted(_answered_ids(tmp_path)) == ["t1", "t2"]
    assert [r["not_run"] for r in _records(tmp_path, "t2")] == [
        "its turn was cancelled before it started"
    ]


async def test_one_principal_cannot_take_every_slot(tmp_path: Path, audit: AuditLog) -> None:
    """Attacker round 98: alice's 64 `sleep 90` calls (read-only, so run side by side) over 4
    sessions took every slot, and everyone else, the admin too, got RESOURCE_EXHAUSTED."""
    scheduler = make_scheduler(
        tmp_path, audit, max_in_flight=4, max_in_flight_per_principal=2, queue_timeout_s=0.3
    )
    store = scheduler._pipeline._sessions
    alice, bob = Caller(principal="alice"), Caller(principal="bob")

    def session_of(owner: str, name: str) -> str:
        folder = tmp_path / name
        folder.mkdir()
        return store.open(PinnedDirectory.pin(folder.resolve()), None, owner=owner).id

    hers = [session_of("alice", "a1"), session_of("alice", "a2")]
    hogs = [
        asyncio.create_task(
            scheduler.execute(req(f"hog{n}", "Safe", hers[n % 2], seconds=1.0), alice)
        )
        for n in range(6)
    ]
    await asyncio.sleep(0.1)
    answer = await scheduler.execute(req("bob", "Safe", session_of("bob", "b")), bob)
    assert answer.result.text() == "done"
    results = await asyncio.gather(*hogs, return_exceptions=True)
    refused = [r for r in results if isinstance(r, Overloaded)]
    assert len(refused) == 4, results
    assert "this principal" in str(refused[0])
    assert scheduler.in_flight == 0


async def test_tenants_together_never_lock_the_admins_out(tmp_path: Path, audit: AuditLog) -> None:
    """Attacker round 99: alice and bob, each within its share, together held every slot, and
    the admin's Read got RESOURCE_EXHAUSTED. Admins have slots of their own beyond the cap."""
    scheduler = make_scheduler(
        tmp_path,
        audit,
        max_in_flight=2,
        max_in_flight_per_principal=1,
        admin_reserve=1,
        queue_timeout_s=0.3,
    )
    store = scheduler._pipeline._sessions

    def session_of(owner: str) -> str:
        folder = tmp_path / owner
        folder.mkdir()
        return store.open(PinnedDirectory.pin(folder.resolve()), None, owner=owner).id

    tenants = [
        asyncio.create_task(
            scheduler.execute(req(who, "Safe", session_of(who), seconds=1.0), Caller(principal=who))
        )
        for who in ("alice", "bob")
    ]
    await asyncio.sleep(0.1)
    admin = Caller(principal="root", admin=True)
    answer = await scheduler.execute(req("admin", "Safe", session_of("root")), admin)
    assert answer.result.text() == "done"
    with pytest.raises(Overloaded, match="calls in flight"):
        await scheduler.execute(
            req("carol", "Safe", session_of("carol")), Caller(principal="carol")
        )
    await asyncio.gather(*tenants)
    assert scheduler.in_flight == 0


@settings(max_examples=25, deadline=None)
@given(
    plan=st.lists(
        st.tuples(st.sampled_from(["Safe", "Unsafe", "Bash"]), st.integers(0, 20)),
        min_size=1,
        max_size=12,
    )
)
def test_answers_keep_request_order_under_random_durations(
    tmp_path_factory: pytest.TempPathFactory, plan: list[tuple[str, int]]
) -> None:
    tmp_path = tmp_path_factory.mktemp("order")
    SPANS.clear()
    with contextlib.closing(AuditLog(str(tmp_path / "audit.jsonl"))) as log:
        scheduler = make_scheduler(tmp_path, log)
        requests = [
            req(f"id{i}", name, seconds=ms / 1000, safe=name != "Bash" or ms % 2 == 0)
            for i, (name, ms) in enumerate(plan)
        ]
        outcomes = asyncio.run(collect(scheduler, requests))
    assert [o.result.tool_use_id for o in outcomes] == [f"id{i}" for i in range(len(plan))]
    for i, (name, _) in enumerate(plan):
        if name == "Unsafe":
            for j in range(len(plan)):
                if j != i:
                    assert not overlap(f"id{i}", f"id{j}")


async def test_a_call_that_crashes_while_prepared_does_not_abort_its_batch(
    tmp_path: Path, audit: AuditLog
) -> None:
    scheduler = make_scheduler(tmp_path, audit)
    requests = [req("s1"), req("c1", "Crashing"), req("s2"), req("u1", "Unsafe")]
    outcomes = await collect(scheduler, requests)
    assert [o.result.tool_use_id for o in outcomes] == ["s1", "c1", "s2", "u1"]
    assert [o.result.is_error for o in outcomes] == [False, True, False, False]
    assert "The Crashing tool failed with an internal error" in outcomes[1].result.text()
