"""Live progress through ExecuteStream, summaries and Bash's working directory, on real Docker.

The daemon runs in this process (tests/integration/harness.py), so its memory is this process's.
"""

from __future__ import annotations

import os
import re
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from tests.integration.conftest import OWNER_GID, OWNER_UID
from tests.integration.harness import RunningDaemon, text_of

pytestmark = [pytest.mark.integration, pytest.mark.docker]

#: Prints a line every 0.4 s for 2 s.
TICKER = "for i in 1 2 3 4 5; do echo tick$i; sleep 0.4; done"


def request(name: str, tool_input: dict[str, Any], session_id: str = "") -> pb.ExecuteRequest:
    tool_use = pb.ToolUse(id=f"toolu_{uuid.uuid4().hex[:16]}", name=name)
    tool_use.input.update(tool_input)
    return pb.ExecuteRequest(session_id=session_id, tool_use=tool_use)


def stream(
    daemon: RunningDaemon, call: pb.ExecuteRequest, pause_s: float = 0.0, slow_reads: int = 0
) -> list[tuple[float, pb.ExecuteEvent]]:
    """Every event of one ExecuteStream with its arrival time; the first `slow_reads` reads are
    each followed by a pause, as a slow client would."""
    started = time.monotonic()
    events: list[tuple[float, pb.ExecuteEvent]] = []
    for event in daemon.stub.ExecuteStream(call, timeout=120):
        events.append((time.monotonic() - started, event))
        if len(events) <= slow_reads:
            time.sleep(pause_s)
    return events


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


@pytest.fixture
def session(sandbox_daemon: RunningDaemon) -> Iterator[pb.Session]:
    """A session of its own (Bash's working directory is per session)."""
    opened: pb.Session = sandbox_daemon.stub.OpenSession(pb.OpenSessionRequest(), timeout=30)
    try:
        yield opened
    finally:
        sandbox_daemon.stub.CloseSession(
            pb.CloseSessionRequest(session_id=opened.id, delete_workspace=True), timeout=30
        )


def bash(daemon: RunningDaemon, command: str, session: pb.Session) -> pb.ExecuteResponse:
    return daemon.execute("Bash", {"command": command}, session_id=session.id)


# --- progress -----------------------------------------------------------------------------------


def test_progress_arrives_before_the_final_response(sandbox_daemon: RunningDaemon) -> None:
    events = stream(sandbox_daemon, request("Bash", {"command": TICKER}))
    kinds = [event.WhichOneof("kind") for _, event in events]
    assert kinds[-1] == "response" and kinds.count("response") == 1
    progress = [(at, event.progress) for at, event in events if event.HasField("progress")]
    assert len(progress) >= 2, kinds
    final_at, final = events[-1]
    # Lines come while the command still runs, not all at once with the result.
    assert progress[0][0] < final_at - 1.0, [at for at, _ in events]
    assert progress[0][1].output.startswith("tick1\n")
    streamed = "".join(p.output for _, p in progress)
    assert streamed == "".join(f"tick{i}\n" for i in range(1, 6))
    assert all(p.tool_use_id == final.response.result.tool_use_id for _, p in progress)
    assert all(p.dropped_chunks == 0 for _, p in progress)
    assert text_of(final.response) == streamed
    assert re.fullmatch(
        r"Ran `for i in 1 2 3 4 5; do .*`: exit 0 after 2\.\d s", final.response.summary
    ), final.response.summary


def test_a_slow_client_gets_a_complete_answer_without_the_daemon_buffering_it_all(
    sandbox_daemon: RunningDaemon,
) -> None:
    # About 12 MB of output over about 4 s, read by a client that stops reading for 5 s after the
    # first event: everything produced meanwhile is coalesced by the runner, then held (bounded)
    # or dropped by the daemon, never stored whole.
    flood = (
        "for i in $(seq 40); do head -c 300000 /dev/zero | tr '\\0' x; echo; sleep 0.1; done; "
        "echo END"
    )
    baseline = rss_bytes()
    peak = baseline
    sampling = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not sampling.wait(0.05):
            peak = max(peak, rss_bytes())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        events = stream(sandbox_daemon, request("Bash", {"command": flood}), 5.0, slow_reads=1)
    finally:
        sampling.set()
        sampler.join(5)
    final = events[-1][1]
    assert final.HasField("response")
    response = final.response
    assert not response.result.is_error, text_of(response)[:300]
    text = text_of(response)
    # 40 x (300000 + a newline) + "END\n": the end of the output and the exact total are there.
    assert "x\nEND\n\n[Output truncated: the command produced 12000044 bytes" in text, text[-300:]
    assert len(text) <= 30_000
    progress = [event.progress for _, event in events if event.HasField("progress")]
    assert progress, "no live output at all"
    assert all(len(p.output.encode()) <= 8_192 + 64 for p in progress)
    duration_s = events[-1][0]
    # At most ~10 chunks a second were produced, whether the client got them or they were dropped.
    assert len(progress) + progress[-1].dropped_chunks <= duration_s * 10 + 5
    assert sum(len(p.output) for p in progress) < 12_000_000 / 10, "progress is coalesced"
    assert peak - baseline < 64 * 1024 * 1024, f"grew by {(peak - baseline) >> 20} MB"


# --- Bash's working directory ---------------------------------------------------------------------


def test_cd_persists_between_calls(sandbox_daemon: RunningDaemon, session: pb.Session) -> None:
    workspace = Path(session.workspace)
    (workspace / "sub").mkdir()
    os.chown(workspace / "sub", OWNER_UID, OWNER_GID)
    first = bash(sandbox_daemon, "cd sub && pwd", session)
    assert not first.result.is_error, text_of(first)
    assert text_of(first) == f"{workspace}/sub\n"
    second = bash(sandbox_daemon, "pwd", session)
    assert text_of(second) == f"{workspace}/sub\n"


def test_environment_variables_do_not_persist(
    sandbox_daemon: RunningDaemon, session: pb.Session
) -> None:
    exported = bash(sandbox_daemon, "export X=1; echo in-call=$X", session)
    assert text_of(exported) == "in-call=1\n"
    later = bash(sandbox_daemon, 'echo "X=[$X]"', session)
    assert text_of(later) == "X=[]\n"


def test_leaving_the_workspace_resets_the_directory_and_says_so(
    sandbox_daemon: RunningDaemon, session: pb.Session
) -> None:
    workspace = Path(session.workspace)
    left = bash(sandbox_daemon, "cd / && pwd", session)
    assert not left.result.is_error, text_of(left)
    assert text_of(left).startswith("/\n")
    assert f"Shell cwd was reset to {workspace}" in text_of(left)
    assert left.summary.endswith("(working directory reset)")
    back = bash(sandbox_daemon, "pwd", session)
    assert text_of(back) == f"{workspace}\n"
    assert "reset" not in text_of(back) and "reset" not in back.summary


# --- summaries over the wire ----------------------------------------------------------------------


def test_each_response_carries_a_summary_for_people(
    sandbox_daemon: RunningDaemon, session: pb.Session
) -> None:
    workspace = Path(session.workspace)
    target = workspace / "src" / "app.py"
    wrote = sandbox_daemon.execute(
        "Write", {"file_path": str(target), "content": "a = 1\nb = 2\n"}, session_id=session.id
    )
    assert wrote.summary == "Wrote 2 lines to src/app.py (new file)", text_of(wrote)
    read = sandbox_daemon.execute("Read", {"file_path": str(target)}, session_id=session.id)
    assert read.summary == "Read 2 lines of src/app.py"
    edited = sandbox_daemon.execute(
        "Edit",
        {"file_path": str(target), "old_string": "nope", "new_string": "x"},
        session_id=session.id,
    )
    assert edited.summary == "Edit failed: old_string not found"
    found = sandbox_daemon.execute(
        "Grep", {"pattern": "b = ", "path": str(workspace)}, session_id=session.id
    )
    assert found.summary == "Found 1 file matching 'b = ' in ./"
    listed = sandbox_daemon.execute("LS", {"path": str(workspace)}, session_id=session.id)
    assert listed.summary == "Listed 2 entries in ./"
    globbed = sandbox_daemon.execute("Glob", {"pattern": "**/*.py"}, session_id=session.id)
    assert globbed.summary == "Glob '**/*.py': 1 file"


@pytest.mark.docker
def test_a_batch_streams_each_calls_progress_between_the_answers_in_order(
    sandbox_daemon: RunningDaemon, session: pb.Session
) -> None:
    slow = "for i in 1 2 3 4; do echo step $i; sleep 0.5; done"
    uses = [pb.ToolUse(id="first", name="Bash"), pb.ToolUse(id="second", name="Bash")]
    uses[0].input.update({"command": slow})
    uses[1].input.update({"command": "echo quick"})
    events = list(
        sandbox_daemon.stub.ExecuteBatchStream(
            pb.ExecuteBatchRequest(session_id=session.id, tool_uses=uses), timeout=120
        )
    )
    answers = [e.response.result.tool_use_id for e in events if e.HasField("response")]
    assert answers == ["first", "second"], "answers out of request order"
    progress = [(i, e.progress) for i, e in enumerate(events) if e.HasField("progress")]
    first_progress = [i for i, p in progress if p.tool_use_id == "first"]
    assert len(first_progress) >= 2, "the slow call's output did not stream"
    first_answer = next(i for i, e in enumerate(events) if e.HasField("response"))
    assert max(first_progress) < first_answer, "progress came after its call's answer"
    text = "".join(p.output for _, p in progress if p.tool_use_id == "first")
    assert "step 1" in text and "step 4" in text


def test_a_batch_stream_cancelled_unread_audits_its_unstarted_calls_at_once(
    sandbox_daemon: RunningDaemon,
) -> None:
    """Attacker round 160: a client that read nothing of an ExecuteBatchStream and then went
    away left the daemon waiting for room in its one-answer queue; the calls that never started
    got their records minutes later, or never (when the garbage collector closed the batch)."""
    import grpc

    from daemon._generated.tooljail.v1 import executor_pb2_grpc as pb_grpc

    opened = sandbox_daemon.stub.OpenSession(pb.OpenSessionRequest(), timeout=30)
    big = Path(opened.workspace) / "big.txt"
    big.write_text("abcdefghij\n" * 27_000)
    os.chown(big, OWNER_UID, OWNER_GID)
    tag = uuid.uuid4().hex[:8]
    uses = [pb.ToolUse(id=f"toolu_read_{tag}_{i}", name="Read") for i in range(6)] + [
        pb.ToolUse(id=f"toolu_bash_{tag}_{i}", name="Bash") for i in range(3)
    ]
    for use in uses[:6]:
        use.input.update({"file_path": str(big)})
    for i, use in enumerate(uses[6:]):
        use.input.update({"command": f"sleep 1; echo ran > marker_{tag}_{i}"})
    options = [("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 1024)]
    with grpc.insecure_channel(sandbox_daemon.target, options=options) as channel:
        call = pb_grpc.ExecutorStub(channel).ExecuteBatchStream(
            pb.ExecuteBatchRequest(session_id=opened.id, tool_uses=uses), timeout=120
        )
        time.sleep(4)  # nothing read
        call.cancel()
    time.sleep(3)
    for i, use in enumerate(uses[6:]):
        assert not (Path(opened.workspace) / f"marker_{tag}_{i}").exists()
        records = [r for r in sandbox_daemon.audit_lines(None) if r["tool_use_id"] == use.id]
        assert [r["event"] for r in records if r["event"] == "answered"] == ["answered"], (
            use.id,
            records,
        )
    sandbox_daemon.stub.CloseSession(pb.CloseSessionRequest(session_id=opened.id), timeout=30)
