"""MCP servers kept for sessions (sandbox/kept.py) over a fake backend whose containers hold a
counting server: state lasts for a session and no longer, one container per (session, server),
restarts with backoff, other limits start afresh, the cap and the idle timer stop servers, and
nothing is left after a session closes or the keeper stops."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sandbox import kept as kept_module
from sandbox.backend import (
    McpSessionCall,
    McpSessionRequest,
    NetworkMode,
    OutputCallback,
    Sandbox,
    SandboxBackend,
    SandboxLimits,
    SandboxRequest,
    SandboxResult,
    SandboxSpec,
)
from sandbox.executor import SandboxExecutor
from sandbox.kept import KeptServers

OPENING = McpSessionRequest(argv=("server",), cwd="/w", timeout_ms=1000)
CALL = McpSessionCall(method="tools/call", params={"name": "count"}, timeout_ms=1000)


class CountingSandbox(Sandbox):
    """A container whose server counts the calls it answered."""

    def __init__(self, backend: CountingBackend, name: str) -> None:
        self.backend = backend
        self.name = name
        self.opened = False
        self.count = 0
        self.destroyed = False

    @property
    def id(self) -> str:
        return self.name

    async def run(
        self, request: SandboxRequest, on_output: OutputCallback | None = None
    ) -> SandboxResult:
        assert not self.destroyed, "asked a removed container"
        if isinstance(request, McpSessionRequest):
            assert not self.opened
            self.opened = True
            if self.backend.fail_open:
                return SandboxResult(sandbox_id=self.name, exit_code=-1, error="cannot start")
            return SandboxResult(sandbox_id=self.name, session_open=True)
        assert isinstance(request, McpSessionCall) and self.opened
        if self.backend.hang:
            await asyncio.sleep(3600)
        self.count += 1
        if self.backend.crash:
            return SandboxResult(sandbox_id=self.name, exit_code=-1, error="it exited")
        return SandboxResult(sandbox_id=self.name, output=str(self.count), session_open=True)

    async def destroy(self) -> None:
        self.destroyed = True
        self.backend.live.discard(self.name)


class CountingBackend(SandboxBackend):
    def __init__(self) -> None:
        self.live: set[str] = set()
        self.specs: list[SandboxSpec] = []
        self.fail_open = False
        self.crash = False
        self.hang = False
        self.starting = asyncio.Event()
        self.may_start = asyncio.Event()
        self.may_start.set()
        self._names = itertools.count(1)

    async def start(self, spec: SandboxSpec, *, tool_use_id: str = "") -> CountingSandbox:
        self.starting.set()
        await self.may_start.wait()
        sandbox = CountingSandbox(self, f"c{next(self._names)}")
        self.specs.append(spec)
        self.live.add(sandbox.name)
        return sandbox

    async def reap(self) -> int:
        return 0

    async def close(self) -> None:
        pass


@pytest.fixture
def backend() -> CountingBackend:
    return CountingBackend()


@pytest.fixture
async def executor(backend: CountingBackend) -> AsyncIterator[SandboxExecutor]:
    executor = SandboxExecutor(backend, pool_size=0)
    yield executor
    await executor.close()
    assert not backend.live, "a container outlived the executor"


def spec(session: str = "s1", network: NetworkMode = NetworkMode.NONE) -> SandboxSpec:
    limits = SandboxLimits(network=network)
    return SandboxSpec(workspace=Path("/w"), session_id=session, limits=limits)


async def settled(backend: CountingBackend, live: int) -> None:
    async with asyncio.timeout(2):
        while len(backend.live) != live:
            await asyncio.sleep(0.005)


async def test_a_server_keeps_its_state_for_its_session_and_no_other(
    backend: CountingBackend, executor: SandboxExecutor
) -> None:
    kept = KeptServers(executor, max_kept=4, idle_s=60)
    first = [(await kept.call(spec("s1"), "box", OPENING, CALL)) for _ in range(3)]
    assert [r.output for r in first] == ["1", "2", "3"]
    assert len({r.sandbox_id for r in first}) == 1
    other = await kept.call(spec("s2"), "box", OPENING, CALL)
    assert other.output == "1" and other.sandbox_id != first[0].sandbox_id
    assert kept.live() == 2
    # Gone once it returns: what a closed session's server does can no longer land in its
    # workspace after CloseSession answered (attacker round 98).
    assert await kept.remove_session("s1") == 1
    assert len(backend.live) == 1
    again = await kept.call(spec("s1"), "box", OPENING, CALL)
    assert again.output == "1", "a closed session's server came back with its state"
    await kept.close()
    await settled(backend, 0)


async def test_calls_to_one_server_of_a_session_take_turns(
    backend: CountingBackend, executor: SandboxExecutor
) -> None:
    kept = KeptServers(executor, max_kept=4, idle_s=60)
    results = await asyncio.gather(*(kept.call(spec(), "box", OPENING, CALL) for _ in range(6)))
    assert sorted(int(r.output) for r in results) == [1, 2, 3, 4, 5, 6]
    assert len(backend.specs) == 1, "concurrent first calls started the server twice"
    await kept.close()


async def test_other_limits_start_the_server_afresh_never_with_more_than_granted(
    backend: CountingBackend, executor: SandboxExecutor
) -> None:
    kept = KeptServers(executor, max_kept=4, idle_s=60)
    assert (await kept.call(spec(), "box", OPENING, CALL)).output == "1"
    egress = await kept.call(spec(network=NetworkMode.EGRESS), "box", OPENING, CALL)
    assert egress.output == "1"
    assert [s.limits.network for s in backend.specs] == [NetworkMode.NONE, NetworkMode.EGRESS]
    await settled(backend, 1)
    await kept.close()


async def test_a_crashed_server_starts_again_and_failed_starts_back_off(
    backend: CountingBackend, executor: SandboxExecutor
) -> None:
    kept = KeptServers(executor, max_kept=4, idle_s=60)
    backend.crash = True
    crashed = await kept.call(spec(), "box", OPENING, CALL)
    assert crashed.error == "it exited"
    await settled(backend, 0)
    backend.crash = False
    assert (await kept.call(spec(), "box", OPENING, CALL)).output == "1"
    await kept.remove_session("s1")

    backend.fail_open = True
    for _ in range(2):  # the first failure is retried at once, the second waits
        assert (await kept.call(spec(), "box", OPENING, CALL)).error == "cannot start"
    starts = len(backend.specs)
    refused = await kept.call(spec(), "box", OPENING, CALL)
    assert "failed 2 times in a row" in refused.error
    assert len(backend.specs) == starts, "started again inside its backoff"
    await kept.close()


async def test_the_cap_stops_the_server_idle_longest_and_refuses_when_all_are_busy(
    backend: CountingBackend, executor: SandboxExecutor
) -> None:
    kept = KeptServers(executor, max_kept=2, idle_s=60)
    await kept.call(spec("s1"), "box", OPENING, CALL)
    await kept.call(spec("s2"), "box", OPENING, CALL)
    await kept.call(spec("s3"), "box", OPENING, CALL)
    assert kept.live() == 2
    back = await kept.call(spec("s1"), "box", OPENING, CALL)
    assert back.output == "1", "s1's server was the one idle longest: it should have gone"

    backend.hang = True
    busy = [asyncio.create_task(kept.call(spec(s), "box", OPENING, CALL)) for s in ("s1", "s3")]
    await asyncio.sleep(0.05)
    refused = await kept.call(spec("s4"), "box", OPENING, CALL)
    assert "all busy" in refused.error and "kept_servers_max" in refused.error
    await kept.close()
    for task in busy:
        task.cancel()
    await asyncio.gather(*busy, return_exceptions=True)


async def test_a_call_waiting_behind_a_hung_one_times_out_without_sending(
    backend: CountingBackend, executor: SandboxExecutor
) -> None:
    kept = KeptServers(executor, max_kept=2, idle_s=60)
    await kept.call(spec(), "box", OPENING, CALL)
    backend.hang = True
    hung = asyncio.create_task(kept.call(spec(), "box", OPENING, CALL))
    await asyncio.sleep(0.05)
    short = McpSessionCall(method="tools/call", params={}, timeout_ms=50)
    waited = await kept.call(spec(), "box", OPENING, short)
    assert waited.timed_out and "nothing was sent" in waited.error
    await kept.close()
    hung.cancel()
    await asyncio.gather(hung, return_exceptions=True)


async def test_an_idle_server_is_stopped(
    backend: CountingBackend, executor: SandboxExecutor
) -> None:
    kept = KeptServers(executor, max_kept=2, idle_s=0.05)
    await kept.call(spec(), "box", OPENING, CALL)
    await settled(backend, 0)
    assert kept.live() == 0
    assert (await kept.call(spec(), "box", OPENING, CALL)).output == "1"
    await kept.close()


async def test_a_session_closed_while_its_server_starts_keeps_nothing(
    backend: CountingBackend, executor: SandboxExecutor
) -> None:
    kept = KeptServers(executor, max_kept=2, idle_s=60)
    backend.may_start.clear()
    call = asyncio.create_task(kept.call(spec(), "box", OPENING, CALL))
    await backend.starting.wait()  # the call holds its slot and is starting the container
    await kept.remove_session("s1")
    backend.may_start.set()
    answered = await call
    assert answered.output == "1", "the call itself still ran"
    await settled(backend, 0)
    assert kept.live() == 0


async def test_without_keeping_each_call_starts_its_server(
    backend: CountingBackend, executor: SandboxExecutor
) -> None:
    kept = KeptServers(executor, max_kept=0, idle_s=60)
    results = [await kept.call(spec(), "box", OPENING, CALL) for _ in range(2)]
    assert [r.output for r in results] == ["1", "1"]
    await settled(backend, 0)


def test_the_first_restart_is_at_once_then_the_waits_grow() -> None:
    assert kept_module.BACKOFF_S[0] == 0
    assert list(kept_module.BACKOFF_S) == sorted(kept_module.BACKOFF_S)


async def test_servers_starting_at_once_count_against_the_cap(
    backend: CountingBackend, executor: SandboxExecutor
) -> None:
    kept = KeptServers(executor, max_kept=2, idle_s=60)
    backend.may_start.clear()  # starting takes a while, as with a real engine
    calls = [asyncio.create_task(kept.call(spec(f"s{n}"), "box", OPENING, CALL)) for n in range(6)]
    await asyncio.sleep(0.05)
    assert len(backend.specs) <= 2, f"{len(backend.specs)} servers started with a cap of 2"
    backend.may_start.set()
    results = await asyncio.gather(*calls)
    assert sum(r.output == "1" for r in results) == 2
    assert all("kept_servers_max" in r.error for r in results if r.output != "1")
    await kept.close()


async def test_one_principal_cannot_push_out_anothers_server(
    backend: CountingBackend, executor: SandboxExecutor
) -> None:
    kept = KeptServers(executor, max_kept=4, idle_s=60, per_owner=2)
    await kept.call(spec("theirs"), "box", OPENING, CALL, owner="p2")
    for n in range(6):
        await kept.call(spec(f"mine{n}"), "box", OPENING, CALL, owner="p1")
    assert kept.live("p1") == 2, "one principal kept more than its share"
    again = await kept.call(spec("theirs"), "box", OPENING, CALL, owner="p2")
    assert again.output == "2", "another principal's server (and its state) was stopped"
    await kept.close()
