"""A result over its budget is kept whole for the session, on the real Docker sandbox and the real
OPA: the model gets a <persisted-output> preview (head and tail, path, size), Read pages through
the kept file, nobody else reaches it (another session, another tool, a path beside it), and it
goes with its session."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from tests.integration.harness import RunningDaemon, text_of

pytestmark = [pytest.mark.integration, pytest.mark.docker]

LINES = 20_000
"""`seq 1 20000` prints 108,894 characters: more than Bash's 30,000-character budget."""


def _kept(daemon: RunningDaemon, session_id: str = "") -> tuple[pb.ExecuteResponse, Path]:
    answered = daemon.execute("Bash", {"command": f"seq 1 {LINES}"}, session_id=session_id)
    assert not answered.result.is_error, text_of(answered)
    assert answered.report.kept_output, "the over-budget output was not kept"
    return answered, Path(answered.report.kept_output)


def test_an_over_budget_output_is_kept_and_read_back_in_pages(
    sandbox_daemon: RunningDaemon,
) -> None:
    answered, path = _kept(sandbox_daemon)
    text = text_of(answered)
    assert text.startswith("<persisted-output>\n") and text.endswith("</persisted-output>")
    assert f"Full output saved to: {path}" in text and "108,894 characters" in text
    head = text.split("Preview (first ", 1)[1]
    assert head.split("\n", 2)[1:2] == ["1"], "the preview does not start at the output's start"
    assert f"\n{LINES}\n</persisted-output>" in text, "the preview lacks the output's end"
    assert len(text) <= 30_000 and answered.report.truncated
    assert answered.report.original_chars == len("\n".join(map(str, range(1, LINES + 1)))) + 1

    assert path.read_text() == "".join(f"{n}\n" for n in range(1, LINES + 1))
    assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700

    page = sandbox_daemon.execute("Read", {"file_path": str(path), "offset": 15_000, "limit": 3})
    assert not page.result.is_error, text_of(page)
    assert re.findall(r"^\s*(\d+)\t(\d+)$", text_of(page), re.M) == [
        ("15000", "15000"),
        ("15001", "15001"),
        ("15002", "15002"),
    ]
    assert page.decision.outcome == pb.ALLOW and not page.report.kept_output


def test_nobody_but_the_sessions_read_reaches_a_kept_output(
    sandbox_daemon: RunningDaemon,
) -> None:
    _, path = _kept(sandbox_daemon)
    other = sandbox_daemon.stub.OpenSession(pb.OpenSessionRequest(), timeout=30)
    try:
        theirs = sandbox_daemon.execute("Read", {"file_path": str(path)}, session_id=other.id)
        assert theirs.result.is_error and theirs.decision.outcome == pb.DENY
        assert "1\n2\n3" not in text_of(theirs)
    finally:
        sandbox_daemon.stub.CloseSession(pb.CloseSessionRequest(session_id=other.id), timeout=30)
    grep = sandbox_daemon.execute("Grep", {"pattern": "15000", "path": str(path)})
    assert grep.result.is_error and grep.decision.outcome == pb.DENY
    folder = sandbox_daemon.execute("Read", {"file_path": str(path.parent)})
    assert folder.result.is_error and folder.decision.outcome == pb.DENY
    beside = sandbox_daemon.execute("Read", {"file_path": str(path.parent.parent / "x.txt")})
    assert beside.result.is_error and beside.decision.outcome == pb.DENY
    cat = sandbox_daemon.execute("Bash", {"command": f"cat {path}"})
    assert "15000" not in text_of(cat), "a sandboxed command read a kept output"


def test_kept_outputs_go_with_their_session(sandbox_daemon: RunningDaemon) -> None:
    session = sandbox_daemon.stub.OpenSession(pb.OpenSessionRequest(), timeout=30)
    _, path = _kept(sandbox_daemon, session.id)
    mine = sandbox_daemon.execute(
        "Read", {"file_path": str(path), "limit": 1}, session_id=session.id
    )
    assert not mine.result.is_error, text_of(mine)
    sandbox_daemon.stub.CloseSession(pb.CloseSessionRequest(session_id=session.id), timeout=30)
    deadline = time.monotonic() + 10
    while path.parent.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not path.parent.exists(), "a closed session's outputs are still kept"


def test_a_batch_cut_short_by_close_session_keeps_nothing_after(
    sandbox_daemon: RunningDaemon,
) -> None:
    session = sandbox_daemon.stub.OpenSession(pb.OpenSessionRequest(), timeout=30)
    _, first = _kept(sandbox_daemon, session.id)
    uses = [pb.ToolUse(id="slow", name="Bash")]
    uses[0].input.update({"command": "sleep 3"})
    for n in range(4):
        big = pb.ToolUse(id=f"big{n}", name=f"NoSuchTool{n}")  # rejected
        big.input.update({"text": "X" * 200_000})  # with a long input
        uses.append(big)
    answers: list[pb.ExecuteResponse] = []

    def run_batch() -> None:
        request = pb.ExecuteBatchRequest(session_id=session.id, tool_uses=uses)
        answers.extend(sandbox_daemon.stub.ExecuteBatch(request, timeout=60))

    runner = threading.Thread(target=run_batch)
    runner.start()
    time.sleep(1.0)
    sandbox_daemon.stub.CloseSession(pb.CloseSessionRequest(session_id=session.id), timeout=30)
    runner.join(60)
    assert len(answers) == len(uses)
    assert not any(a.report.kept_output for a in answers[1:])
    time.sleep(0.5)
    assert not first.parent.exists(), "a closed session's outputs folder came back"
