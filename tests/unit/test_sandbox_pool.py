"""Warm pool bookkeeping: FIFO, sizes, caps, idle expiry, each sandbox out exactly once."""

from __future__ import annotations

import pytest

from sandbox.backend import OutputCallback, Sandbox, SandboxRequest, SandboxResult
from sandbox.pool import WarmPool


class Stub(Sandbox):
    def __init__(self, name: str) -> None:
        self.name = name

    @property
    def id(self) -> str:
        return self.name

    async def run(
        self, request: SandboxRequest, on_output: OutputCallback | None = None
    ) -> SandboxResult:
        raise NotImplementedError

    async def destroy(self) -> None:
        raise NotImplementedError


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_take_is_first_in_first_out_and_each_sandbox_leaves_once(clock: Clock) -> None:
    pool = WarmPool(size=2, idle_ttl_s=60, max_total=10, clock=clock)
    a, b = Stub("a"), Stub("b")
    assert pool.add("k", a) and pool.add("k", b)
    assert pool.take("k") is a
    assert pool.take("k") is b
    assert pool.take("k") is None
    assert pool.take("other") is None
    assert pool.drain() == [] and pool.expire() == []


def test_add_refuses_beyond_the_size(clock: Clock) -> None:
    pool = WarmPool(size=1, idle_ttl_s=60, max_total=10, clock=clock)
    assert pool.add("k", Stub("a"))
    assert not pool.add("k", Stub("b"))
    assert pool.ready("k") == 1


def test_deficit_counts_ready_and_starting_and_respects_the_global_cap(clock: Clock) -> None:
    pool = WarmPool(size=2, idle_ttl_s=60, max_total=3, clock=clock)
    assert pool.deficit("k") == 2
    pool.starting("k", 1)
    assert pool.deficit("k") == 1
    pool.add("k", Stub("a"))
    pool.starting("k", -1)
    assert pool.deficit("k") == 1
    pool.add("j", Stub("b"))
    pool.starting("j", 1)
    assert pool.total() == 3
    assert pool.deficit("k") == 0  # the cap, not the key's size, is the limit now
    assert pool.deficit("x") == 0


def test_size_zero_disables_the_pool(clock: Clock) -> None:
    pool = WarmPool(size=0, idle_ttl_s=60, max_total=10, clock=clock)
    assert pool.deficit("k") == 0
    assert not pool.add("k", Stub("a"))


def test_idle_sandboxes_expire_and_are_never_handed_out(clock: Clock) -> None:
    pool = WarmPool(size=2, idle_ttl_s=60, max_total=10, clock=clock)
    old, young = Stub("old"), Stub("young")
    pool.add("k", old)
    clock.now += 30
    pool.add("k", young)
    clock.now += 31
    assert pool.take("k") is young
    assert pool.expire() == [old]
    pool.add("k", Stub("c"))
    clock.now += 60
    assert [s.id for s in pool.expire()] == ["c"]
    assert pool.ready() == 0


def test_drain_returns_everything_once(clock: Clock) -> None:
    pool = WarmPool(size=2, idle_ttl_s=60, max_total=10, clock=clock)
    pool.add("k", Stub("a"))
    pool.add("j", Stub("b"))
    assert sorted(s.id for s in pool.drain()) == ["a", "b"]
    assert pool.drain() == []


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="idle_ttl_s > 0"):
        WarmPool(size=1, idle_ttl_s=0, max_total=1)
