"""A client that does not read its answers holds the daemon's memory only so long and so much
(attacker round 162: 30 unread ExecuteBatch streams held 560 MB of calls and answers, with no
end): a stream whose client takes no message for `answer_take_timeout_s` is ended and its calls
not started are not run; and what one principal's open requests hold together is bounded by
`max_held_request_bytes`. Real OPA, no sandbox (Read runs on the host)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon._generated.tooljail.v1 import executor_pb2_grpc as pb_grpc
from tests.integration.harness import RunningDaemon, running_daemon
from tests.reliability.support import wait_for

pytestmark = pytest.mark.integration

#: A client channel whose HTTP/2 window stays small: the daemon's writes stall once about one
#: answer waits unread (by default grpc grows the window to megabytes).
SMALL_WINDOW = [("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 1024)]
#: Calls of the first parallel group (the scheduler's default max_parallel) and two after it.
FIRST_GROUP = 10
#: What one principal's open calls may hold: each RPC twice its requests' bytes, what they
#: hold converted, and room for its answers (800 kB: the default turn budget, 200,000
#: characters, at 4 bytes each).
HELD_LIMIT = 8 << 20


def _daemon(folder: Path, name: str, take_timeout_s: float) -> Iterator[RunningDaemon]:
    workspace = folder / f"ws-{name}"
    workspace.mkdir()
    with running_daemon(
        workspace,
        folder / f"{name}.sock",
        sandbox={"enabled": False},
        answer_take_timeout_s=take_timeout_s,
        max_request_bytes=1 << 20,
        max_held_request_bytes=HELD_LIMIT,
    ) as daemon:
        yield daemon


@pytest.fixture(scope="module")
def strict_daemon(short_tmp: Path) -> Iterator[RunningDaemon]:
    """Ends a stream whose client took nothing for a second."""
    yield from _daemon(short_tmp, "unread", 1.0)


@pytest.fixture
def patient_daemon(short_tmp: Path) -> Iterator[RunningDaemon]:
    """Waits ten minutes for a client to take an answer: unread streams stay open."""
    yield from _daemon(short_tmp, f"patient-{uuid.uuid4().hex[:6]}", 600.0)


def _reads(path: Path, count: int, tag: str, padding: str = "") -> list[pb.ToolUse]:
    uses = [pb.ToolUse(id=f"toolu_{tag}_{i}", name="Read") for i in range(count)]
    for use in uses:
        use.input.update({"file_path": str(path)})
    if padding:
        # Not a field of Read's: the call is refused by its schema, but the request is held
        # (converted, checked, answered) as any other would be.
        uses[0].input.update({"padding": padding})
    return uses


def _answered_before_the_share_ran_out(daemon: RunningDaemon, uses: list[pb.ToolUse]) -> list[str]:
    """The ids answered in one ExecuteTurn of `uses`, which must end RESOURCE_EXHAUSTED for
    holding past its principal's share."""
    messages = [pb.TurnMessage(tool_use=use) for use in uses] + [pb.TurnMessage(end=pb.TurnEnd())]
    answered = []
    with pytest.raises(grpc.RpcError) as raised:
        for event in daemon.stub.ExecuteTurn(iter(messages), timeout=120):
            if event.HasField("response"):
                answered.append(event.response.result.tool_use_id)
    assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, raised.value
    assert "your open requests hold" in (raised.value.details() or "")
    return answered


def _big_file(daemon: RunningDaemon, name: str) -> Path:
    path = daemon.workspace.resolve() / name
    path.write_text("abcdefghij\n" * 27_000)
    return path


def test_a_stream_whose_answers_are_not_taken_is_ended_and_its_unstarted_calls_not_run(
    strict_daemon: RunningDaemon,
) -> None:
    tag = uuid.uuid4().hex[:8]
    uses = _reads(_big_file(strict_daemon, f"big-{tag}.txt"), FIRST_GROUP + 2, tag)
    later = [use.id for use in uses[FIRST_GROUP:]]

    def later_answered() -> bool:
        records = strict_daemon.audit_lines()
        return {str(r["tool_use_id"]) for r in records} >= set(later)

    with grpc.insecure_channel(strict_daemon.target, options=SMALL_WINDOW) as channel:
        call = pb_grpc.ExecutorStub(channel).ExecuteBatch(
            pb.ExecuteBatchRequest(tool_uses=uses), timeout=120
        )
        # Nothing is read: the second group can only get its records by the stream's end.
        assert wait_for(later_answered, timeout_s=60), "the unread batch was never ended"
        records = {str(r["tool_use_id"]): r for r in strict_daemon.audit_lines()}
        for tool_use_id in later:
            assert records[tool_use_id]["not_run"] == "its batch ended before it started", records[
                tool_use_id
            ]
        with pytest.raises(grpc.RpcError) as raised:
            list(call)
    error = raised.value
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error
    assert "took no message" in (error.details() or ""), error.details()


def test_a_client_that_reads_gets_every_answer(strict_daemon: RunningDaemon) -> None:
    tag = uuid.uuid4().hex[:8]
    uses = _reads(_big_file(strict_daemon, f"big-{tag}.txt"), FIRST_GROUP + 2, tag)
    with grpc.insecure_channel(strict_daemon.target, options=SMALL_WINDOW) as channel:
        answers = []
        for response in pb_grpc.ExecutorStub(channel).ExecuteBatch(
            pb.ExecuteBatchRequest(tool_uses=uses), timeout=120
        ):
            answers.append(response.result.tool_use_id)
            time.sleep(0.2)  # slow, but within the take timeout
    assert answers == [use.id for use in uses]


@pytest.mark.parametrize(
    "padding",
    # ASCII: 900 kB on the wire, 900 kB converted. One emoji makes the text take 4 bytes a
    # character converted (attacker round 164): 450 kB on the wire, 1.8 MB converted.
    ["p" * 900_000, "\U0001f600" + "p" * 449_999],
    ids=["ascii", "wide"],
)
def test_what_one_principals_open_requests_hold_is_bounded(
    patient_daemon: RunningDaemon, padding: str
) -> None:
    tag = uuid.uuid4().hex[:8]
    big = _big_file(patient_daemon, f"big-{tag}.txt")
    # Two of these (about 3.5 MB each with their answers' room) fit; a third does not.
    with grpc.insecure_channel(patient_daemon.target, options=SMALL_WINDOW) as channel:
        stub = pb_grpc.ExecutorStub(channel)
        # Two requests of nearly half the share each, held open (nothing is read).
        held = [
            stub.ExecuteBatch(
                pb.ExecuteBatchRequest(tool_uses=_reads(big, 3, f"{tag}_{n}", padding)),
                timeout=120,
            )
            for n in range(2)
        ]
        assert wait_for(
            lambda: (
                len([r for r in patient_daemon.audit_lines() if tag in str(r["tool_use_id"])]) >= 2
            )
        )
        with pytest.raises(grpc.RpcError) as raised:
            stub.Execute(
                pb.ExecuteRequest(tool_use=_reads(big, 1, f"{tag}_third", padding)[0]),
                timeout=60,
            )
        assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, raised.value
        assert "your open requests hold" in (raised.value.details() or "")
        for stream in held:
            stream.cancel()

    # What they held is free again once they ended.
    def accepted() -> bool:
        try:
            answer = patient_daemon.stub.Execute(
                pb.ExecuteRequest(tool_use=_reads(big, 1, f"{tag}_after", padding)[0]),
                timeout=60,
            )
        except grpc.RpcError:
            return False
        return "padding" in answer.result.content[0].text.text

    assert wait_for(accepted, timeout_s=30)


def test_a_streamed_turn_holds_each_of_its_messages_until_it_ends(
    patient_daemon: RunningDaemon,
) -> None:
    tag = uuid.uuid4().hex[:8]
    big = _big_file(patient_daemon, f"big-{tag}.txt")
    # The turn's answers' room and two of these (2.85 MB each) fit; a third does not.
    padding = "p" * 950_000
    uses = [_reads(big, 1, f"{tag}_{n}", padding)[0] for n in range(3)]
    assert _answered_before_the_share_ran_out(patient_daemon, uses) == [uses[0].id, uses[1].id]


def test_what_a_turns_inputs_hold_converted_is_counted_not_only_their_bytes(
    patient_daemon: RunningDaemon,
) -> None:
    """Attacker round 163: a turn of inputs made of `{}` values (2 bytes each on the wire, about
    72 once converted) held 18 times what was counted, for as long as the turn stayed open."""
    tag = uuid.uuid4().hex[:8]
    big = _big_file(patient_daemon, f"big-{tag}.txt")
    uses = [_reads(big, 1, f"{tag}_{n}")[0] for n in range(15)]
    for use in uses:
        # About 40 kB on the wire, about 700 kB converted: the fifteen hold 10 MB converted.
        use.input.update({"empties": [{} for _ in range(10_000)]})
    assert sum(use.ByteSize() for use in uses) < HELD_LIMIT // 10
    assert len(_answered_before_the_share_ran_out(patient_daemon, uses)) < len(uses)


def test_a_stream_ended_for_not_being_read_holds_its_share_until_it_is_over(
    strict_daemon: RunningDaemon,
) -> None:
    """Attacker round 163: a stream ended for not being read, whose client took neither the
    waiting message nor the status, stayed open with its share let go: such streams piled up
    without bound."""
    tag = uuid.uuid4().hex[:8]
    big = _big_file(strict_daemon, f"big-{tag}.txt")
    # Ten streams hold ten answers' rooms (8 MB of the 8 MiB share) while they are open.
    batches = [_reads(big, FIRST_GROUP + 2, f"{tag}_{n}") for n in range(10)]
    later = {use.id for uses in batches for use in uses[FIRST_GROUP:]}

    def all_ended() -> bool:
        return {str(r["tool_use_id"]) for r in strict_daemon.audit_lines()} >= later

    def one_more_call() -> grpc.StatusCode:
        try:
            strict_daemon.stub.Execute(
                pb.ExecuteRequest(tool_use=_reads(big, 1, f"{tag}_more_{uuid.uuid4().hex}")[0]),
                timeout=60,
            )
        except grpc.RpcError as exc:
            return exc.code()  # type: ignore[no-any-return]
        return grpc.StatusCode.OK

    with grpc.insecure_channel(strict_daemon.target, options=SMALL_WINDOW) as channel:
        stub = pb_grpc.ExecutorStub(channel)
        calls = [
            stub.ExecuteBatch(pb.ExecuteBatchRequest(tool_uses=uses), timeout=120)
            for uses in batches
        ]
        assert wait_for(all_ended, timeout_s=60), "the unread batches were never ended"
        assert one_more_call() == grpc.StatusCode.RESOURCE_EXHAUSTED
        for call in calls:
            call.cancel()
    assert wait_for(lambda: one_more_call() == grpc.StatusCode.OK, timeout_s=30)
