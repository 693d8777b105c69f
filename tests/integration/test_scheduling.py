"""Scheduling with the real daemon: idempotent retries, deadlines, batches, load."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from tests.integration.conftest import wait_no_containers
from tests.integration.harness import RunningDaemon, text_of

pytestmark = [pytest.mark.integration]


def tool_use(tool_id: str, name: str, **tool_input: object) -> pb.ToolUse:
    use = pb.ToolUse(id=tool_id, name=name)
    use.input.update(tool_input)
    return use


@pytest.mark.docker
def test_retried_bash_appends_once(sandbox_daemon: RunningDaemon, sandbox_dir: Path) -> None:
    target = sandbox_dir / "f"
    use = tool_use("toolu_append_once", "Bash", command=f"echo x >> {target}")
    request = pb.ExecuteRequest(tool_use=use)
    with ThreadPoolExecutor(max_workers=5) as pool:
        responses = list(
            pool.map(lambda _: sandbox_daemon.stub.Execute(request, timeout=120), range(5))
        )
    assert target.read_text() == "x\n"
    assert all(not r.result.is_error for r in responses)
    assert sorted(r.report.replayed for r in responses) == [False, True, True, True, True]
    later = sandbox_daemon.stub.Execute(request, timeout=120)
    assert later.report.replayed and target.read_text() == "x\n"
    changed = pb.ExecuteRequest(tool_use=tool_use("toolu_append_once", "Bash", command="true"))
    with pytest.raises(grpc.RpcError) as reused:
        sandbox_daemon.stub.Execute(changed, timeout=60)
    assert reused.value.code() == grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.docker
def test_deadline_kills_the_sandboxed_command(sandbox_daemon: RunningDaemon) -> None:
    request = pb.ExecuteRequest(tool_use=tool_use("toolu_deadline", "Bash", command="sleep 600"))
    with pytest.raises(grpc.RpcError) as expired:
        sandbox_daemon.stub.Execute(request, timeout=3)
    assert expired.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    keep = sandbox_daemon.settings.sandbox.pool_size
    assert wait_no_containers(sandbox_daemon.daemon.instance_id, keep=keep) <= keep


@pytest.mark.docker
def test_batch_runs_reads_in_parallel_and_writes_alone(
    sandbox_daemon: RunningDaemon, sandbox_dir: Path
) -> None:
    (sandbox_dir / "a.txt").write_text("a\n")
    uses = [
        tool_use("b1", "Read", file_path=str(sandbox_dir / "a.txt")),
        tool_use("b2", "Bash", command=f"ls {sandbox_dir}"),
        tool_use("b3", "Bash", command=f"echo new > {sandbox_dir}/b.txt"),
        tool_use("b4", "Read", file_path=str(sandbox_dir / "b.txt")),
    ]
    responses = list(sandbox_daemon.stub.ExecuteBatch(pb.ExecuteBatchRequest(tool_uses=uses)))
    assert [r.result.tool_use_id for r in responses] == ["b1", "b2", "b3", "b4"]
    assert "a.txt" in text_of(responses[1])
    # b4 ran after b3 finished: it sees the file b3 wrote.
    assert not responses[3].result.is_error and "new" in text_of(responses[3])


@pytest.mark.docker
def test_failing_read_only_bash_cancels_its_parallel_siblings(
    sandbox_daemon: RunningDaemon,
) -> None:
    uses = [
        tool_use("p1", "Bash", command="sleep 30"),
        tool_use("p2", "Bash", command="ls /nonexistent-dir"),
    ]
    started = time.monotonic()
    responses = list(sandbox_daemon.stub.ExecuteBatch(pb.ExecuteBatchRequest(tool_uses=uses)))
    del started
    assert responses[1].result.is_error and "Exit code" in text_of(responses[1])
    assert responses[0].result.is_error
    assert "parallel" in text_of(responses[0]) and "p2" in text_of(responses[0])


def test_load_of_mixed_calls_answers_each_exactly_once(
    host_daemon: RunningDaemon, workdir: Path
) -> None:
    for i in range(20):
        (workdir / f"f{i}.txt").write_text(f"file {i}\n")
    seen: dict[str, int] = {}
    lock = threading.Lock()

    def stream(n: int) -> None:
        uses = [
            tool_use(f"load-{n}-{i}", name, **tool_input)
            for i, (name, tool_input) in enumerate(
                [
                    ("Read", {"file_path": str(workdir / f"f{n % 20}.txt")}),
                    ("Grep", {"pattern": "file", "path": str(workdir)}),
                    ("Glob", {"pattern": "*.txt", "path": str(workdir)}),
                    ("LS", {"path": str(workdir)}),
                    ("Nope", {}),
                ]
            )
        ]
        for _ in range(4):
            answers = list(host_daemon.stub.ExecuteBatch(pb.ExecuteBatchRequest(tool_uses=uses)))
            assert [a.result.tool_use_id for a in answers] == [u.id for u in uses]
            with lock:
                for a in answers:
                    seen[a.result.tool_use_id] = seen.get(a.result.tool_use_id, 0) + 1

    with ThreadPoolExecutor(max_workers=50) as pool:
        list(pool.map(stream, range(50)))
    # 50 streams x 4 rounds x 5 calls = 1,000 answers; each id answered once per round
    # (rounds 2-4 are idempotent replays of round 1, never a second run).
    assert sum(seen.values()) == 1_000
    assert set(seen.values()) == {4}
    records = [r for r in host_daemon.audit_lines() if r["tool_use_id"].startswith("load-")]
    allowed = [r["tool_use_id"] for r in records if r["outcome"] == "allow"]
    assert len(allowed) == len(set(allowed)) == 200, "each allowed call ran exactly once"
    # Calls that were never run (an unknown tool) are not remembered: answered again, not run.
    assert {r["outcome"] for r in records if r["tool"] == "Nope"} == {"not_evaluated"}


def test_parallel_greps_of_a_batch_share_one_walk(
    host_daemon: RunningDaemon, workdir: Path
) -> None:
    for i in range(60):
        sub = workdir / f"pkg{i % 4}"
        sub.mkdir(exist_ok=True)
        (sub / f"mod{i}.py").write_text(f"def f{i}():\n    return {i}\n# marker_{i % 5}\n")
    grep_inputs: list[dict[str, object]] = [
        {"pattern": "marker_1", "path": str(workdir)},
        {"pattern": r"return \d+5$", "path": str(workdir)},
        {"pattern": "marker_1", "path": "/etc"},  # denied by policy: never reaches ripgrep
        {"pattern": "marker_[23]", "path": str(workdir), "head_limit": 5},
        {"pattern": "marker_4", "path": str(workdir), "output_mode": "count"},  # searches alone
    ]
    uses = [tool_use(f"toolu_g{i}", "Grep", **raw) for i, raw in enumerate(grep_inputs)]
    batch = list(host_daemon.stub.ExecuteBatch(pb.ExecuteBatchRequest(tool_uses=uses)))
    alone = [host_daemon.execute("Grep", raw) for raw in grep_inputs]
    assert [r.result.tool_use_id for r in batch] == [u.id for u in uses]
    assert [text_of(r) for r in batch] == [text_of(r) for r in alone]
    assert batch[2].decision.outcome == pb.DENY
    assert len(text_of(batch[0]).split("\n")[1:]) == 12  # "Found 12 files", then the files
    shared = ["one search shared with 2 other Grep calls" in r.summary for r in batch]
    assert shared == [True, True, False, True, False], [r.summary for r in batch]
    assert not any("shared" in r.summary for r in alone)
