"""A turn's results together stay under the turn budget (200,000 characters by the shipped policy),
on the real Docker sandbox and the real OPA: an ExecuteBatch whose results would pass it, and
single Execute calls naming one turn, get the overflow kept whole and previewed; other turns are
not touched."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from tests.integration.harness import RunningDaemon, text_of
from tests.integration.test_scheduling import tool_use

pytestmark = [pytest.mark.integration, pytest.mark.docker]

CHARS = 29_000
"""Each result: just under Bash's own budget of 30,000 characters."""
COMMAND = f"head -c {CHARS} /dev/zero | tr '\\0' y"


def _sizes(answers: list[pb.ExecuteResponse]) -> list[int]:
    return [len(text_of(answer)) for answer in answers]


def test_a_batch_over_the_turn_budget_keeps_the_overflow(sandbox_daemon: RunningDaemon) -> None:
    uses = [tool_use(f"turn{n}", "Bash", command=COMMAND) for n in range(8)]
    answers = list(sandbox_daemon.stub.ExecuteBatch(pb.ExecuteBatchRequest(tool_uses=uses)))
    assert [a.result.tool_use_id for a in answers] == [u.id for u in uses]
    assert all(not a.result.is_error for a in answers), [text_of(a)[:200] for a in answers]
    assert sum(_sizes(answers)) <= 200_000
    previewed = [a for a in answers if a.report.kept_output]
    assert previewed and all(text_of(a).startswith("<persisted-output>") for a in previewed)
    assert len(previewed) < len(answers), "more results were shrunk than the turn needed"
    kept = Path(previewed[0].report.kept_output)
    assert kept.read_text().rstrip("\n") == "y" * CHARS


def test_single_calls_naming_a_turn_share_its_budget(sandbox_daemon: RunningDaemon) -> None:
    turn = uuid.uuid4().hex
    answers = [sandbox_daemon.execute("Bash", {"command": COMMAND}, turn_id=turn) for _ in range(8)]
    assert sum(_sizes(answers)) <= 200_000 and any(a.report.kept_output for a in answers)
    other = sandbox_daemon.execute("Bash", {"command": COMMAND}, turn_id=uuid.uuid4().hex)
    alone = sandbox_daemon.execute("Bash", {"command": COMMAND})
    assert not other.report.kept_output and not alone.report.kept_output
    assert len(text_of(alone)) >= CHARS
