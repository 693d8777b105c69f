"""SandboxExecutor over a fake backend: warm pool, never reuse, cleanup on every path."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from sandbox import after_answer
from sandbox import executor as executor_module
from sandbox.backend import (
    BashRequest,
    OutputCallback,
    Sandbox,
    SandboxBackend,
    SandboxLimits,
    SandboxNotDelivered,
    SandboxRequest,
    SandboxResult,
    SandboxSpec,
    SandboxStartError,
    WriteFileRequest,
)
from sandbox.executor import SandboxExecutor
from sandbox.memory import MemoryBudget, MemoryRefused
from sandbox.socket_memory import reserved_mb

REQUEST = BashRequest(command="echo hi", cwd="/w", timeout_ms=1000)


class FakeSandbox(Sandbox):
    def __init__(self, backend: FakeBackend, name: str, spec: SandboxSpec) -> None:
        self.backend = backend
        self.name = name
        self.spec = spec
        self.runs = 0
        self.destroyed = False

    @property
    def id(self) -> str:
        return self.name

    async def run(
        self, request: SandboxRequest, on_output: OutputCallback | None = None
    ) -> SandboxResult:
        self.runs += 1
        assert self.runs == 1, "a sandbox was reused"
        assert not self.destroyed, "ran on a destroyed sandbox"
        behaviour = self.backend.behaviour
        try:
            if behaviour == "dead":
                raise SandboxNotDelivered("gone")
            if behaviour == "hang":
                await asyncio.sleep(3600)
            if behaviour == "leftovers":
                return SandboxResult(sandbox_id=self.name, output="hi\n", leftovers=2)
        except asyncio.CancelledError:
            await self.destroy()
            raise
        if on_output is not None:
            on_output(f"live from {self.name}\n")
        return SandboxResult(sandbox_id=self.name, output="hi\n")

    async def destroy(self) -> None:
        self.destroyed = True
        if self.name not in self.backend.stuck:
            self.backend.live.discard(self.name)

    @property
    def gone(self) -> bool:
        return self.name not in self.backend.live


class FakeBackend(SandboxBackend):
    def __init__(self) -> None:
        self.started: list[FakeSandbox] = []
        self.live: set[str] = set()
        self.behaviour = "ok"
        self.fail_start = False
        self.closed = False
        self.reap_calls = 0
        self.stuck: set[str] = set()
        """Containers whose removal the engine refuses (their processes do not die)."""
        self._names = itertools.count(1)

    async def start(self, spec: SandboxSpec, *, tool_use_id: str = "") -> FakeSandbox:
        await asyncio.sleep(0.001)
        if self.fail_start:
            raise SandboxStartError("image missing")
        sandbox = FakeSandbox(self, f"c{next(self._names)}", spec)
        self.started.append(sandbox)
        self.live.add(sandbox.name)
        return sandbox

    async def reap(self) -> int:
        return 0

    async def exists(self, sandbox_id: str) -> bool:
        return sandbox_id in self.live

    async def reap_untracked(self) -> int:
        self.reap_calls += 1
        return 1

    async def close(self) -> None:
        self.closed = True


@pytest.fixture
def backend() -> FakeBackend:
    return FakeBackend()


@pytest.fixture
async def make_executor(backend: FakeBackend) -> AsyncIterator[Callable[..., SandboxExecutor]]:
    made: list[SandboxExecutor] = []

    def make(**kwargs: float) -> SandboxExecutor:
        executor = SandboxExecutor(backend, **kwargs)  # type: ignore[arg-type]
        made.append(executor)
        return executor

    yield make
    for executor in made:
        await executor.close()


def spec(session: str = "s1", workspace: str = "/w", timeout_ms: int = 1000) -> SandboxSpec:
    limits = SandboxLimits(timeout_ms=timeout_ms)
    return SandboxSpec(workspace=Path(workspace), session_id=session, limits=limits)


async def until(condition: Callable[[], bool], timeout: float = 2.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.005)


async def test_first_call_is_cold_then_the_pool_serves_warm(
    backend: FakeBackend, make_executor: Callable[..., SandboxExecutor]
) -> None:
    executor = make_executor(pool_size=2)
    first = await executor.run(spec(), REQUEST)
    assert first.output == "hi\n"
    await until(lambda: executor.stats().pooled == 2)
    second = await executor.run(spec(), REQUEST)
    stats = executor.stats()
    assert (stats.pool_misses, stats.pool_hits) == (1, 1)
    assert second.sandbox_id != first.sandbox_id
    assert second.sandbox_id in {s.name for s in backend.started[1:3]}


async def test_every_container_runs_once_and_is_destroyed_after(
    backend: FakeBackend, make_executor: Callable[..., SandboxExecutor]
) -> None:
    executor = make_executor(pool_size=2)
    ids = [(await executor.run(spec(), REQUEST)).sandbox_id for _ in range(6)]
    assert len(set(ids)) == 6
    used = [s for s in backend.started if s.runs]
    await until(lambda: all(s.destroyed for s in used))
    assert executor.stats().removed >= 6


async def test_warm_fills_the_pool_and_reports_start_failures(
    backend: FakeBackend, make_executor: Callable[..., SandboxExecutor]
) -> None:
    executor = make_executor(pool_size=3)
    assert await executor.warm(spec()) == 3
    assert await executor.warm(spec()) == 3  # already full: nothing more started
    assert len(backend.started) == 3
    backend.fail_start = True
    with pytest.raises(SandboxStartError, match="image missing"):
        await executor.warm(spec(workspace="/elsewhere"))


async def test_sessions_and_timeouts_share_a_pool_and_pooled_containers_carry_no_session(
    backend: FakeBackend, make_executor: Callable[..., SandboxExecutor]
) -> None:
    executor = make_executor(pool_size=1)
    await executor.warm(spec("a", timeout_ms=5000))
    result = await executor.run(spec("b", timeout_ms=90_000), REQUEST)
    assert executor.stats().pool_hits == 1
    served = next(s for s in backend.started if s.name == result.sandbox_id)
    assert served.spec.session_id == ""


async def test_cold_containers_carry_the_session(
    backend: FakeBackend, make_executor: Callable[..., SandboxExecutor]
) -> None:
    executor = make_executor(pool_size=0)
    result = await executor.run(spec("b"), REQUEST)
    served = next(s for s in backend.started if s.name == result.sandbox_id)
    assert served.spec.session_id == "b"


async def test_pool_size_zero_is_always_cold(
    backend: FakeBackend, make_executor: Callable[..., SandboxExecutor]
) -> None:
    executor = make_executor(pool_size=0)
    for _ in range(3):
        await executor.run(spec(), REQUEST)
    assert executor.stats().pool_misses == 3
    assert executor.stats().pooled == 0
    assert len(backend.started) == 3


async def test_the_caller_is_told_when_its_request_goes_to_a_container(
    backend: FakeBackend, make_executor: Callable[..., SandboxExecutor]
) -> None:
    executor = make_executor(pool_size=1)
    told: list[tuple[int, int]] = []

    def on_start() -> None:  # containers started, requests run so far
        told.append((len(backend.started), sum(sandbox.runs for sandbox in backend.started)))

    await executor.run(spec(), REQUEST, on_start=on_start)  # cold
    await until(lambda: executor.stats().pooled == 1)
    await executor.run(spec(), REQUEST, on_start=on_start)  # warm
    assert told == [(1, 0), (2, 1)]


async def test_cancel_destroys_the_container_before_propagating(
    backend: FakeBackend, make_executor: Callable[..., SandboxExecutor]
) -> None:
    executor = make_executor(pool_size=0)
    backend.behaviour = "hang"
    task = asyncio.create_task(executor.run(spec(), REQUEST))
    await until(lambda: executor.stats().in_flight == 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert backend.started[0].destroyed
    assert backend.live == set()


async def test_a_dead_warm_container_falls_back_to_a_cold_one(
    backend: FakeBackend, make_executor: Callable[..., SandboxExecutor]
) -> None:
    executor = make_executor(pool_size=1)
    await executor.warm(spec())
    backend.behaviour = "dead"
    with pytest.raises(SandboxStartError, match="nothing ran"):
        # the cold one is dead too here: the caller learns nothing ran, nothing loops
        await executor.run(spec(), REQUEST)
    stats = executor.stats()
    assert (stats.not_delivered, stats.pool_misses) == (1, 1)
    backend.behaviour = "ok"
    assert (await executor.run(spec(), REQUEST)).output == "hi\n"


async def test_idle_containers_expire_after_the_ttl(
    backend: FakeBackend, make_executor: Callable[..., SandboxExecutor]
) -> None:
    executor = make_executor(pool_size=2, idle_ttl_s=0.05, maintenance_interval_s=0.01)
    await executor.warm(spec())
    await until(lambda: len(backend.started) == 2 and all(s.destroyed for s in backend.started))
    assert executor.stats().pooled == 0
    assert all(s.runs == 0 for s in backend.started)


async def test_untracked_leftovers_are_reaped_periodically(
    backend: FakeBackend, make_executor: Callable[..., SandboxExecutor]
) -> None:
    executor = make_executor(pool_size=0, reap_interval_s=0.02, maintenance_interval_s=0.01)
    await executor.run(spec(), REQUEST)
    await until(lambda: backend.reap_calls >= 2)
    assert executor.stats().reaped >= 2


async def test_close_destroys_pooled_and_in_flight_and_refuses_new_calls(
    backend: FakeBackend, make_executor: Callable[..., SandboxExecutor]
) -> None:
    executor = make_executor(pool_size=2)
    await executor.warm(spec())
    backend.behaviour = "hang"
    task = asyncio.create_task(executor.run(spec(), REQUEST))
    await until(lambda: executor.stats().in_flight == 1)
    closing = asyncio.create_task(executor.close())
    await until(lambda: backend.live == set())
    task.cancel()  # the fake does not notice its destruction; a real container's EOF would
    await asyncio.gather(task, return_exceptions=True)
    await closing
    assert backend.closed
    assert all(s.destroyed for s in backend.started)
    with pytest.raises(SandboxStartError, match="closed"):
        await executor.run(spec(), REQUEST)


@pytest.mark.parametrize(
    "request_",
    [
        BashRequest(command="ls", cwd="/etc", timeout_ms=1000),
        BashRequest(command="ls", cwd="/w/../etc", timeout_ms=1000),
        BashRequest(command="ls", cwd="w", timeout_ms=1000),
        WriteFileRequest(path="/wx/file", content=""),
    ],
)
async def test_paths_outside_the_workspace_are_refused_before_any_container(
    backend: FakeBackend, make_executor: Callable[..., SandboxExecutor], request_: SandboxRequest
) -> None:
    result = await make_executor(pool_size=0).run(spec(), request_)
    assert "is not inside the workspace /w" in result.error
    assert backend.started == []


async def test_paths_inside_the_workspace_are_accepted(
    backend: FakeBackend, make_executor: Callable[..., SandboxExecutor]
) -> None:
    executor = make_executor(pool_size=0)
    for request in (
        BashRequest(command="ls", cwd="/w/sub/..", timeout_ms=1000),
        WriteFileRequest(path="/w/a/b.txt", content=""),
    ):
        assert (await executor.run(spec(), request)).error == ""


async def test_output_callback_reaches_the_sandbox_that_runs_the_request(
    backend: FakeBackend, make_executor: Callable[..., SandboxExecutor]
) -> None:
    executor = make_executor(pool_size=1)
    await executor.warm(spec())
    backend.behaviour = "dead"  # the warm one turns out dead: the call goes cold, output follows
    chunks: list[str] = []
    with pytest.raises(SandboxStartError):
        await executor.run(spec(), REQUEST, on_output=chunks.append)
    assert chunks == []
    backend.behaviour = "ok"
    result = await executor.run(spec(), REQUEST, on_output=chunks.append)
    assert chunks == [f"live from {result.sandbox_id}\n"]
    quiet = await executor.run(spec(), REQUEST)
    assert quiet.output == "hi\n" and len(chunks) == 1


async def test_a_call_ending_after_its_workspace_was_discarded_refills_nothing(
    backend: FakeBackend, make_executor: Callable[..., SandboxExecutor]
) -> None:
    executor = make_executor(pool_size=2)
    backend.behaviour = "hang"
    running = asyncio.create_task(executor.run(spec(), REQUEST))
    await until(lambda: any(s.runs for s in backend.started))
    await executor.discard_workspace("/w")  # the session closed, its workspace is going
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    await asyncio.sleep(0.05)
    assert len(backend.started) == 1, "containers were started for a discarded workspace"
    assert executor.stats().pooled == 0


async def test_fills_under_way_when_a_workspace_is_discarded_are_not_kept(
    backend: FakeBackend, make_executor: Callable[..., SandboxExecutor]
) -> None:
    executor = make_executor(pool_size=2)
    await executor.run(spec(), REQUEST)  # its refill starts two containers
    await executor.discard_workspace("/w")
    await until(lambda: len(backend.started) == 3)
    await asyncio.sleep(0.05)
    assert executor.stats().pooled == 0
    await until(lambda: all(s.destroyed for s in backend.started))


async def test_a_discarded_workspace_used_again_is_pooled_again(
    backend: FakeBackend, make_executor: Callable[..., SandboxExecutor]
) -> None:
    executor = make_executor(pool_size=1)
    await executor.run(spec(), REQUEST)
    await until(lambda: executor.stats().pooled == 1)
    await executor.discard_workspace("/w")
    await executor.run(spec(session="s2"), REQUEST)  # a new session over the same folder
    await until(lambda: executor.stats().pooled == 1)


def owned(owner: str, workspace: str) -> SandboxSpec:
    return spec(workspace=workspace).model_copy(update={"pool_owner": owner})


def inside(workspace: str) -> BashRequest:
    return BashRequest(command="echo hi", cwd=workspace, timeout_ms=1000)


async def test_one_principal_filling_the_pool_does_not_leave_another_cold(
    backend: FakeBackend, make_executor: Callable[..., SandboxExecutor]
) -> None:
    executor = make_executor(pool_size=2, max_pooled=8, max_pooled_per_owner=4)
    for n in range(4):  # alice's sessions: she may hold half the pool, not all of it
        await executor.run(owned("alice", f"/a{n}"), inside(f"/a{n}"))
        await asyncio.sleep(0.02)
    await until(lambda: executor.stats().pooled == 4)
    await asyncio.sleep(0.05)
    assert executor.stats().pooled == 4
    await executor.run(owned("bob", "/b"), inside("/b"))
    await until(lambda: executor.stats().pooled == 6)
    hits = executor.stats().pool_hits
    await executor.run(owned("bob", "/b"), inside("/b"))
    assert executor.stats().pool_hits == hits + 1


async def test_a_full_pool_makes_room_for_a_principal_under_its_share(
    backend: FakeBackend, make_executor: Callable[..., SandboxExecutor]
) -> None:
    executor = make_executor(pool_size=2, max_pooled=4, max_pooled_per_owner=4)
    for n in range(2):
        await executor.run(owned("alice", f"/a{n}"), inside(f"/a{n}"))
    await until(lambda: executor.stats().pooled == 4)
    await executor.run(owned("bob", "/b"), inside("/b"))
    # Alice's oldest went to make room: bob is under his share, alice holds the most.
    await until(lambda: len(backend.started) == 2 + 4 + 1 + 2)
    await until(lambda: executor.stats().pooled == 4)
    hits = executor.stats().pool_hits
    await executor.run(owned("bob", "/b"), inside("/b"))
    assert executor.stats().pool_hits == hits + 1
    taken_from_alice = [s for s in backend.started if s.spec.pool_owner == "alice" and s.destroyed]
    assert len(taken_from_alice) >= 2 + 2  # her two calls' containers, and two pooled ones


async def test_while_an_answer_is_held_the_used_container_stays_and_the_pool_is_not_refilled(
    backend: FakeBackend, make_executor: Callable[..., SandboxExecutor]
) -> None:
    executor = make_executor(pool_size=1)
    await executor.warm(spec())
    with after_answer.holding() as held:
        result = await executor.run(spec(), REQUEST)
    used = next(s for s in backend.started if s.name == result.sandbox_id)
    await asyncio.sleep(0.05)
    assert not used.destroyed
    assert len(backend.started) == 1  # no refill yet
    held.release()
    await until(lambda: used.destroyed and executor.stats().pooled == 1)
    assert executor.stats().removed == 1


async def test_close_removes_a_container_whose_answer_was_never_released(
    backend: FakeBackend, make_executor: Callable[..., SandboxExecutor]
) -> None:
    executor = make_executor(pool_size=0)
    with after_answer.holding() as held:
        result = await executor.run(spec(), REQUEST)
    await executor.close()
    assert backend.live == set()
    held.release()  # after the close: nothing is started or removed twice
    await asyncio.sleep(0.01)
    assert executor.stats().removed == 1
    assert [s.name for s in backend.started] == [result.sandbox_id]


async def test_a_command_whose_leftovers_outlived_the_runners_wait_is_removed_before_its_answer(
    backend: FakeBackend, make_executor: Callable[..., SandboxExecutor]
) -> None:
    """What the runner could not see gone may still write: the container goes first (the engine
    stops it, and its PID namespace ends with its last process), even while answers are held."""
    executor = make_executor(pool_size=0)
    backend.behaviour = "leftovers"
    with after_answer.holding():
        result = await executor.run(spec(), REQUEST)
    used = next(s for s in backend.started if s.name == result.sandbox_id)
    assert used.destroyed
    assert result.output == "hi\n"
    assert "2 process(es) the command left" in result.error
    assert "removed before this answer" in result.error
    assert executor.stats().removed == 1


def sized(owner: str, memory_mb: int, workspace: str = "/w") -> SandboxSpec:
    limits = SandboxLimits(timeout_ms=1000, memory_mb=memory_mb)
    return SandboxSpec(workspace=Path(workspace), limits=limits, pool_owner=owner)


async def test_a_calls_memory_is_held_until_its_container_is_removed(
    backend: FakeBackend, make_executor: Callable[..., SandboxExecutor]
) -> None:
    budget = MemoryBudget(1024, owner_share=1.0, wait_s=30)
    executor = make_executor(pool_size=1, memory=budget)
    await executor.warm(sized("alice", 512))
    with after_answer.holding() as held:
        result = await executor.run(sized("alice", 512), REQUEST)
    used = next(s for s in backend.started if s.name == result.sandbox_id)
    # its memory limit, and its socket buffers beside it
    assert not used.destroyed and budget.held("alice") == 512 + 64 == reserved_mb(512)
    held.release()
    await until(lambda: used.destroyed)
    assert budget.held() == 0
    assert executor.stats().memory_held_mb == 0
    assert executor.stats().memory_budget_mb == 1024


async def test_a_call_over_the_budget_waits_for_another_calls_container_to_go(
    backend: FakeBackend, make_executor: Callable[..., SandboxExecutor]
) -> None:
    budget = MemoryBudget(1024, owner_share=1.0, wait_s=30)
    executor = make_executor(pool_size=0, memory=budget)
    with after_answer.holding() as held:
        first = await executor.run(sized("alice", 768), REQUEST)
    second = asyncio.create_task(executor.run(sized("bob", 512), REQUEST))
    await asyncio.sleep(0.05)
    assert not second.done()
    assert [s.name for s in backend.started] == [first.sandbox_id]  # nothing started for bob
    held.release()
    assert (await asyncio.wait_for(second, 2)).output == "hi\n"
    await until(lambda: budget.held() == 0)


async def test_a_call_that_never_fits_is_refused_with_nothing_started(
    backend: FakeBackend, make_executor: Callable[..., SandboxExecutor]
) -> None:
    budget = MemoryBudget(2 * reserved_mb(256), owner_share=0.5, wait_s=0.05)
    executor = make_executor(pool_size=0, memory=budget)
    with pytest.raises(MemoryRefused, match="more than one principal's sandboxes"):
        await executor.run(sized("alice", 257), REQUEST)
    with after_answer.holding():
        await executor.run(sized("alice", 256), REQUEST)
        with pytest.raises(MemoryRefused, match="Nothing ran after"):
            await executor.run(sized("alice", 1), REQUEST)
    assert len(backend.started) == 1
    assert executor.stats().memory_refused == 2


async def test_a_dead_warm_container_or_a_failed_start_gives_the_memory_back(
    backend: FakeBackend, make_executor: Callable[..., SandboxExecutor]
) -> None:
    budget = MemoryBudget(1024, owner_share=1.0, wait_s=30)
    executor = make_executor(pool_size=1, memory=budget)
    await executor.warm(sized("alice", 512))
    backend.behaviour = "dead"
    with pytest.raises(SandboxStartError, match="ended before it got the request"):
        await executor.run(sized("alice", 512), REQUEST)
    tried = [s for s in backend.started if s.runs]
    assert len(tried) == 2  # the warm one, then a cold one
    await until(lambda: all(s.destroyed for s in tried))
    assert budget.held() == 0
    backend.behaviour, backend.fail_start = "ok", True
    with pytest.raises(SandboxStartError, match="image missing"):
        await executor.run(sized("alice", 512, workspace="/cold"), inside("/cold"))
    assert budget.held() == 0


async def test_a_cancelled_call_gives_its_memory_back_once_its_container_is_gone(
    backend: FakeBackend, make_executor: Callable[..., SandboxExecutor]
) -> None:
    budget = MemoryBudget(reserved_mb(960), owner_share=1.0, wait_s=30)
    executor = make_executor(pool_size=0, memory=budget)
    backend.behaviour = "hang"
    call = asyncio.create_task(executor.run(sized("alice", 960), REQUEST))
    await until(lambda: budget.held() == budget.total_mb and bool(backend.started))
    waiting = asyncio.create_task(executor.run(sized("bob", 512), REQUEST))
    await asyncio.sleep(0.02)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    backend.behaviour = "ok"
    assert (await asyncio.wait_for(waiting, 2)).output == "hi\n"
    await until(lambda: budget.held() == 0)


async def test_closing_refuses_calls_waiting_for_memory(
    backend: FakeBackend, make_executor: Callable[..., SandboxExecutor]
) -> None:
    budget = MemoryBudget(reserved_mb(512), owner_share=1.0, wait_s=30)
    executor = make_executor(pool_size=0, memory=budget)
    backend.behaviour = "hang"
    running = asyncio.create_task(executor.run(sized("alice", 512), REQUEST))
    await until(lambda: bool(backend.started))
    waiting = asyncio.create_task(executor.run(sized("bob", 512), REQUEST))
    await asyncio.sleep(0.02)
    await executor.close()
    with pytest.raises(SandboxStartError, match="shutting down"):
        await waiting
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)
    assert len(backend.started) == 1 and backend.live == set()
    assert budget.held() == 0


async def test_a_container_the_engine_could_not_remove_keeps_its_memory_until_it_is_gone(
    backend: FakeBackend,
    make_executor: Callable[..., SandboxExecutor],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Attacker round 105's lead: the memory went back whatever the removal achieved, while a
    container whose processes are stuck in the kernel still held it."""
    monkeypatch.setattr(executor_module, "LINGERING_LOOK_S", 0.01)
    budget = MemoryBudget(reserved_mb(512), owner_share=1.0, wait_s=30)
    executor = make_executor(pool_size=0, memory=budget, maintenance_interval_s=0.01)
    backend.stuck.add("c1")
    await executor.run(sized("alice", 512), REQUEST)
    await until(lambda: backend.started[0].destroyed)
    await asyncio.sleep(0.05)
    assert budget.held() == reserved_mb(512), "given back while the container is still there"
    waiting = asyncio.create_task(executor.run(sized("bob", 512), REQUEST))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    backend.live.discard("c1")  # the engine (or the periodic sweep) removed it at last
    assert (await asyncio.wait_for(waiting, 10)).output == "hi\n"
