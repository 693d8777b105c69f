"""DockerBackend.remove against a fake engine: a container is gone before removal returns."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import Any

import docker
import pytest
import requests

from sandbox import docker_backend


def _refused() -> docker.errors.APIError:
    response = requests.Response()
    response.status_code = 500
    return docker.errors.APIError("Could not kill running container", response=response)


def _in_progress() -> docker.errors.APIError:
    response = requests.Response()
    response.status_code = 409
    return docker.errors.APIError(
        "Conflict", response, explanation="removal of container c1 is already in progress"
    )


@dataclass
class FakeEngine:
    """An engine whose container's processes die only after `running_for` inspections."""

    running_for: int = 0
    unreachable: bool = False
    calls: list[str] = field(default_factory=list)

    removing_elsewhere: bool = False

    def remove_container(self, container_id: str, **_: Any) -> None:
        self.calls.append("remove")
        if self.unreachable:
            raise requests.ConnectionError("engine down")
        if self.running_for > 0:
            raise _in_progress() if self.removing_elsewhere else _refused()

    def inspect_container(self, container_id: str) -> dict[str, Any]:
        self.calls.append("inspect")
        if self.unreachable:
            raise requests.ConnectionError("engine down")
        self.running_for -= 1
        return {"State": {"Running": self.running_for >= 0, "Pid": 0}}


async def test_a_container_the_engine_cannot_kill_yet_is_removed_once_it_stopped(
    backend_over: Any,
) -> None:
    """Attacker round 95: a process stuck in the kernel kept the container running, the engine
    refused the removal, and the call was answered while that process went on to write."""
    engine = FakeEngine(running_for=3)
    assert await backend_over(engine).remove("c1") is True
    assert engine.calls == ["remove", "inspect", "inspect", "inspect", "inspect", "remove"]


async def test_an_engine_that_does_not_answer_is_not_waited_for(backend_over: Any) -> None:
    engine = FakeEngine(unreachable=True)
    assert await backend_over(engine).remove("c1") is False  # not known gone: still held
    assert engine.calls == ["remove", "inspect", "remove", "inspect"]


async def test_a_container_still_running_past_the_patience_is_given_up_and_said(
    backend_over: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(docker_backend, "REMOVAL_PATIENCE_S", 0.0)
    engine = FakeEngine(running_for=1_000)
    assert await backend_over(engine).remove("c1") is False
    assert engine.calls == ["remove", "inspect"]
    assert "still runs" in caplog.text


async def test_a_removal_is_waited_for_through_cancellations_which_come_after_it() -> None:
    """Attacker round 96: a cancel during a refused removal unwound the call at once, and the
    repository look after it ran while the container's stuck process was still to write."""
    gone = asyncio.Event()

    async def removal() -> None:
        await gone.wait()

    task = asyncio.ensure_future(removal())
    waiter = asyncio.create_task(docker_backend._to_the_end(task))
    for _ in range(2):
        await asyncio.sleep(0.01)
        waiter.cancel()
    await asyncio.sleep(0.01)
    assert not waiter.done(), "the waiter unwound before the removal ended"
    gone.set()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert task.done() and not task.cancelled()


async def test_a_removal_already_in_progress_elsewhere_is_waited_for_too(backend_over: Any) -> None:
    """Round 97's lead: the engine answering that another request (the periodic sweep, an
    automatic removal) is removing the container was taken for its being gone, while a process
    of it that does not die yet could still write."""
    engine = FakeEngine(running_for=2, removing_elsewhere=True)
    await backend_over(engine).remove("c1")
    assert engine.calls == ["remove", "inspect", "inspect", "inspect", "remove"]


async def test_removals_stuck_in_the_engine_never_hold_up_other_work(backend_over: Any) -> None:
    """Attacker round 98's lead: the engine's threads were one pool for everything, and a
    removal of a container whose processes are stuck in the kernel holds its thread until the
    engine gives up; enough of them at once and every tenant's next container waited."""
    stuck = threading.Event()

    class StuckEngine(FakeEngine):
        def remove_container(self, container_id: str, **_: Any) -> None:
            stuck.wait(30)

        def ping(self) -> bool:
            return True

    backend = backend_over(StuckEngine())
    removals = [asyncio.create_task(backend.remove(f"c{n}")) for n in range(12)]
    try:
        await asyncio.sleep(0.1)
        assert await asyncio.wait_for(backend.ping(), 5)
    finally:
        stuck.set()
        await asyncio.gather(*removals)
