"""ExecuteTurn, on the real Docker sandbox: tool_use blocks sent one by one while the "model" is
still streaming start as soon as the scheduling rules allow (a concurrency-safe call at once
beside the running ones of its group, any other call after everything before it), answers come
back in arrival order with progress between them, a failing Bash cancels its running siblings,
and a bad message ends the turn with INVALID_ARGUMENT after the calls before it were answered."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from shlex import quote

import grpc
import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from tests.integration.harness import RunningDaemon, text_of

pytestmark = [pytest.mark.integration, pytest.mark.docker]


def _use(tool_id: str, name: str, **tool_input: object) -> pb.TurnMessage:
    use = pb.ToolUse(id=tool_id, name=name)
    use.input.update(tool_input)
    return pb.TurnMessage(tool_use=use)


def _streamed(session_id: str, *parts: pb.TurnMessage | float) -> Iterator[pb.TurnMessage]:
    """The turn as a model would stream it: a number is a pause (the model still writing)."""
    yield pb.TurnMessage(start=pb.TurnStart(session_id=session_id))
    for part in parts:
        if isinstance(part, float):
            time.sleep(part)
        else:
            yield part
    yield pb.TurnMessage(end=pb.TurnEnd())


@pytest.fixture
def session(sandbox_daemon: RunningDaemon) -> Iterator[pb.Session]:
    opened: pb.Session = sandbox_daemon.stub.OpenSession(pb.OpenSessionRequest(), timeout=30)
    try:
        yield opened
    finally:
        sandbox_daemon.stub.CloseSession(pb.CloseSessionRequest(session_id=opened.id), timeout=30)


def _answers(events: list[pb.ExecuteEvent]) -> list[pb.ExecuteResponse]:
    return [e.response for e in events if e.HasField("response")]


def test_blocks_start_as_they_arrive_and_answer_in_order(
    sandbox_daemon: RunningDaemon, session: pb.Session
) -> None:
    marker = quote(f"{session.workspace}/c.txt")
    turn = _streamed(
        session.id,
        _use("a", "Bash", command="sleep 3; date +%s.%N"),
        0.5,
        _use("b", "Bash", command="date +%s.%N"),  # safe: joins a's group, runs at once
        _use("c", "Bash", command=f"date +%s.%N > {marker}; cat {marker}"),  # waits for both
    )
    answers = _answers(list(sandbox_daemon.stub.ExecuteTurn(turn, timeout=120)))
    assert [a.result.tool_use_id for a in answers] == ["a", "b", "c"]
    assert not any(a.result.is_error for a in answers), [text_of(a) for a in answers]
    a_done, b_ran, c_ran = (float(text_of(a).strip()) for a in answers)
    assert b_ran < a_done, "b waited for a although both only read"
    assert c_ran >= a_done, "c, which writes, ran beside a"


def test_a_failing_bash_cancels_its_running_siblings(
    sandbox_daemon: RunningDaemon, session: pb.Session
) -> None:
    turn = _streamed(
        session.id,
        _use("slow", "Bash", command="sleep 30"),
        0.3,
        _use("bad", "Bash", command="ls /nonexistent-dir"),
    )
    started = time.monotonic()
    answers = _answers(list(sandbox_daemon.stub.ExecuteTurn(turn, timeout=120)))
    assert time.monotonic() - started < 25, "the sibling was not cancelled"
    assert [a.result.tool_use_id for a in answers] == ["slow", "bad"]
    assert answers[0].result.is_error and "parallel" in text_of(answers[0])
    assert answers[1].result.is_error and "Exit code" in text_of(answers[1])


def test_a_bad_message_ends_the_turn_after_answering_what_came_before(
    sandbox_daemon: RunningDaemon, session: pb.Session
) -> None:
    turn = _streamed(session.id, _use("ok", "Bash", command="echo fine"), _use("ok", "LS"))
    events = []
    with pytest.raises(grpc.RpcError) as failed:
        for event in sandbox_daemon.stub.ExecuteTurn(turn, timeout=120):
            events.append(event)
    assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "already sent in this turn" in (failed.value.details() or "")
    assert [a.result.tool_use_id for a in _answers(events)] == ["ok"]


def test_a_principal_holds_a_bounded_number_of_turn_streams(
    sandbox_daemon: RunningDaemon, session: pb.Session
) -> None:
    import threading

    release = threading.Event()

    def idle_turn() -> Iterator[pb.TurnMessage]:
        yield pb.TurnMessage(start=pb.TurnStart(session_id=session.id))
        release.wait(60)
        yield pb.TurnMessage(end=pb.TurnEnd())

    streams = [sandbox_daemon.stub.ExecuteTurn(idle_turn(), timeout=90) for _ in range(8)]
    try:
        time.sleep(1.0)  # all eight are open on the daemon
        with pytest.raises(grpc.RpcError) as refused:
            list(sandbox_daemon.stub.ExecuteTurn(idle_turn(), timeout=30))
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "too many turn streams" in (refused.value.details() or "")
    finally:
        release.set()
        for stream in streams:
            assert list(stream) == []


def test_calls_after_a_failed_group_still_run(
    sandbox_daemon: RunningDaemon, session: pb.Session
) -> None:
    target = f"{session.workspace}/after.txt"
    turn = _streamed(
        session.id,
        _use("h1", "Bash", command="ls /nonexistent-dir"),
        1.0,  # h1 has failed by now: h2 joins a failed group and never runs
        _use("h2", "Glob", pattern="*.txt"),
        _use("h3", "Write", file_path=target, content="written\n"),
    )
    answers = _answers(list(sandbox_daemon.stub.ExecuteTurn(turn, timeout=60)))
    assert [a.result.tool_use_id for a in answers] == ["h1", "h2", "h3"]
    assert not answers[2].result.is_error, text_of(answers[2])
    with open(target) as written:
        assert written.read() == "written\n"
    # Attacker round 154: h2 was told it "ran in parallel" and "was stopped", and the audit had
    # no record of it.
    assert answers[1].result.is_error and text_of(answers[1]).startswith("Not run:")
    answered = [
        r
        for r in sandbox_daemon.audit_lines(None)
        if r["tool_use_id"] == "h2" and r["session"] == session.id
    ]
    assert [(r["event"], r.get("not_run", "")) for r in answered] == [
        ("answered", "the Bash call h1 of its group had failed")
    ]


def test_a_cancelled_turn_starts_none_of_its_later_calls(
    sandbox_daemon: RunningDaemon, session: pb.Session
) -> None:
    """Attacker round 158: cancelling an ExecuteTurn stream let the calls after the running one
    start once it was cancelled, and run to their end with nobody to answer."""
    marker = f"{session.workspace}/after_cancel.txt"

    def turn() -> Iterator[pb.TurnMessage]:
        yield pb.TurnMessage(start=pb.TurnStart(session_id=session.id))
        yield _use("first", "Bash", command="sleep 4; echo one")
        yield _use("second", "Bash", command=f"echo two > {quote(marker)}")
        time.sleep(30)  # no TurnEnd: the model is still writing when the caller goes away

    call = sandbox_daemon.stub.ExecuteTurn(turn(), timeout=60)
    time.sleep(1.5)
    call.cancel()
    time.sleep(6)
    assert not os.path.exists(marker), "a call of the cancelled turn ran"
    records = [
        r
        for r in sandbox_daemon.audit_lines(None)
        if r["tool_use_id"] == "second" and r["session"] == session.id
    ]
    assert [(r["event"], r.get("not_run")) for r in records] == [
        ("answered", "its turn was cancelled before it started")
    ]
