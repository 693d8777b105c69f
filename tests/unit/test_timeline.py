"""The call timeline: marks in order, phases between them, nothing from outside a recorded call,
and runner marks that cannot move a phase (sandbox/timeline.py, docker_backend)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from sandbox import timeline
from sandbox.docker_backend import _mark_runner_phases


def test_phases_run_from_the_previous_mark() -> None:
    origin = time.monotonic() - 1
    with timeline.recording(origin) as recorded:
        timeline.mark("decision", origin + 0.002)
        timeline.mark("pool_take", origin + 0.003)
    phases = recorded.phases()
    assert [name for name, _ in phases] == ["decision", "pool_take"]
    assert phases[0][1] == pytest.approx(0.002)
    assert phases[1][1] == pytest.approx(0.001)


def test_marks_outside_a_recorded_call_go_nowhere() -> None:
    timeline.mark("decision")  # no timeline: nothing to do, nothing raised
    with timeline.recording(time.monotonic()) as recorded:
        pass
    timeline.mark("late")
    assert recorded.phases() == []


def test_a_time_in_the_future_is_ignored_and_one_before_the_last_mark_has_no_length() -> None:
    """The CI saw a phase of a sandboxed call missing: the runner's mark can come before the
    daemon's `sent` on another core, and was dropped."""
    origin = time.monotonic() - 1
    with timeline.recording(origin) as recorded:
        timeline.mark("first", origin + 0.001)
        timeline.mark("backwards", origin)
        timeline.mark("future", time.monotonic() + 60)
        timeline.mark("nan", float("nan"))
    assert [name for name, _ in recorded.phases()] == ["first", "backwards"]
    assert recorded.phases()[1][1] == 0


def test_a_timeline_keeps_a_bounded_number_of_marks() -> None:
    with timeline.recording(time.monotonic()) as recorded:
        for index in range(timeline.MAX_MARKS * 3):
            timeline.mark(f"m{index}")
    assert len(recorded.phases()) == timeline.MAX_MARKS


async def test_tasks_started_for_a_call_mark_its_timeline_and_calls_stay_apart() -> None:
    async def call(name: str) -> list[str]:
        with timeline.recording(time.monotonic()) as recorded:
            timeline.mark(f"{name}-before")
            await asyncio.create_task(_mark_later(f"{name}-in-task"))
            await asyncio.sleep(0)
            timeline.mark(f"{name}-after")
        return [phase for phase, _ in recorded.phases()]

    first, second = await asyncio.gather(call("a"), call("b"))
    assert first == ["a-before", "a-in-task", "a-after"]
    assert second == ["b-before", "b-in-task", "b-after"]


async def _mark_later(name: str) -> None:
    await asyncio.sleep(0)
    timeline.mark(name)


def test_runner_marks_are_taken_only_when_known_numbers_in_order() -> None:
    origin = time.monotonic() - 1
    with timeline.recording(origin) as recorded:
        _mark_runner_phases(
            [
                ["received", origin + 0.001],
                ["spawned", origin + 0.002],
                ["exited", origin + 0.004],
                ["answered", origin + 0.0045],
            ]
        )
    assert [name for name, _ in recorded.phases()] == [
        "runner_received",
        "runner_spawned",
        "runner_exited",
        "runner_answered",
    ]


@pytest.mark.parametrize(
    "reported",
    [
        None,
        "received",
        {"received": 1.0},
        [["received"]],
        [["rm -rf /", 1.0]],
        [["received", "1.0"]],
        [["received", True]],
        [["received", 10**300]],
        [["received", -1.0]],
        [["received", float("inf")]],
        # Attack: json.loads takes a 400-digit number, and float() of it raised OverflowError
        # out of the call (an internal error for a command that had run).
        json.loads('[["received", 1' + "0" * 400 + "]]"),
    ],
)
def test_runner_marks_that_are_not_plain_known_times_are_dropped(reported: object) -> None:
    with timeline.recording(time.monotonic()) as recorded:
        _mark_runner_phases(reported)
    assert recorded.phases() == []


def test_a_runner_cannot_report_more_marks_than_it_has() -> None:
    origin = time.monotonic() - 1
    many = [["received", origin + i * 1e-6] for i in range(100)]
    with timeline.recording(origin) as recorded:
        _mark_runner_phases(many)
    assert len(recorded.phases()) == 4
