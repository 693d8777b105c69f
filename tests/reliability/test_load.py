"""Load: 1,000 concurrent mixed calls over several sessions against `tooljail serve` in its own
process. Every call is answered exactly once, with its own session's data, in request order within
its batch; no container and no temporary file is left; the daemon's memory returns near its
baseline."""

from __future__ import annotations

import functools
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from tests.reliability.conftest import Figure, Record
from tests.reliability.support import (
    CHAOS,
    DaemonProcess,
    container_ids,
    owned_workspace,
    rss_bytes,
    scaled,
    settle_containers,
    text_of,
    tool_use,
    unique,
)

pytestmark = [pytest.mark.integration, pytest.mark.docker]

BATCH = 10
MIB = 1 << 20


@dataclass(frozen=True)
class Planned:
    """One call of the load and what its answer must show."""

    tool_use: pb.ToolUse
    session: str
    expect: str
    """Text the answer must contain."""
    writes: Path | None = None
    """The file a Write creates."""


def _prepare(workspace: Path, marker: str) -> None:
    (workspace / "src").mkdir(exist_ok=True)
    (workspace / "a.txt").write_text(f"{marker}\nsecond line\n")
    for n in range(5):
        (workspace / "src" / f"m{n}.py").write_text(f"def f{n}():\n    return '{marker}'\n")


def _plan_batch(index: int, session: pb.Session, marker: str) -> list[Planned]:
    """Nine read-only calls and one sandboxed call (Bash echo, or a Write mid-batch)."""
    ws = session.workspace
    reads: list[tuple[str, dict[str, Any], str]] = [
        ("Read", {"file_path": f"{ws}/a.txt"}, marker),
        ("Glob", {"pattern": "**/*.py", "path": ws}, "m4.py"),
        ("Grep", {"pattern": marker, "path": ws, "output_mode": "count"}, "Total: 6"),
        ("LS", {"path": ws}, "src/"),
        ("Read", {"file_path": f"{ws}/src/m1.py", "offset": 2}, marker),
        ("Grep", {"pattern": "def f3", "path": ws, "output_mode": "content"}, "m3.py"),
        ("Glob", {"pattern": "*.txt", "path": ws}, "a.txt"),
        ("Read", {"file_path": f"{ws}/a.txt", "limit": 1}, marker),
        ("LS", {"path": f"{ws}/src"}, "m0.py"),
    ]
    calls = [
        Planned(tool_use(name, tool_input, f"toolu_{uuid.uuid4().hex}"), session.id, expect)
        for name, tool_input, expect in reads
    ]
    sandboxed_id = f"toolu_{uuid.uuid4().hex}"
    if index % 2:
        target = Path(ws) / "written" / f"w{index}.txt"
        write = tool_use("Write", {"file_path": str(target), "content": sandboxed_id}, sandboxed_id)
        calls.insert(4, Planned(write, session.id, "created", writes=target))
    else:
        echo = tool_use("Bash", {"command": f"echo {sandboxed_id}"}, sandboxed_id)
        calls.append(Planned(echo, session.id, sandboxed_id))
    return calls


class MemorySampler:
    """Samples a process's RSS in the background; keeps the peak."""

    def __init__(self, pid: int) -> None:
        self._pid = pid
        self.peak = rss_bytes(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self.peak = max(self.peak, rss_bytes(self._pid))

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


@pytest.mark.timeout(1800 if CHAOS else 300)
def test_a_thousand_concurrent_mixed_calls(
    rel_tmp: Path, docker_ready: None, record: Record, figure: Figure
) -> None:
    folder = rel_tmp / "load"
    workspace = owned_workspace(folder / "ws")
    instance = unique("rel-load")
    pool_size = 2
    env = {
        "TOOLJAIL_SANDBOX__POOL_SIZE": str(pool_size),
        # The whole load is queued at once: calls wait their turn rather than give up.
        "TOOLJAIL_SCHEDULER__QUEUE_TIMEOUT_S": "240",
    }
    daemon = DaemonProcess(folder, workspace, instance, env)
    total = scaled(1000, 5000)
    sessions_count = 4
    try:
        daemon.start()
        assert daemon.stub is not None
        stub = daemon.stub
        sessions = [stub.OpenSession(pb.OpenSessionRequest(), timeout=30) for _ in range(4)]
        markers = {s.id: f"marker-{s.id}" for s in sessions}
        for session in sessions:
            _prepare(Path(session.workspace), markers[session.id])

        def plan_round(first: int) -> list[list[Planned]]:
            """One batch per index from `first` on (the index names the files a Write makes)."""
            return [
                _plan_batch(
                    first + i,
                    sessions[i % sessions_count],
                    markers[sessions[i % sessions_count].id],
                )
                for i in range(total // BATCH)
            ]

        batches = plan_round(0)
        # Warm up (one batch per session), then take the baseline.
        warm = [_plan_batch(total + 1, s, markers[s.id]) for s in sessions]
        for planned in warm:
            list(stub.ExecuteBatch(_batch_request(planned), timeout=120))
        time.sleep(1)
        baseline = rss_bytes(daemon.pid)

        # Most batches go through ExecuteBatch, one in five as separate Execute calls.
        def run_batch(
            planned_round: list[list[Planned]], number: int
        ) -> list[pb.ExecuteResponse] | str:
            planned = planned_round[number]
            try:
                if number % 5 == 4:
                    return [
                        stub.Execute(pb.ExecuteRequest(tool_use=p.tool_use, session_id=p.session),
                                     timeout=300)
                        for p in planned
                    ]  # fmt: skip
                return list(stub.ExecuteBatch(_batch_request(planned), timeout=300))
            except grpc.RpcError as exc:
                return f"{exc.code().name}: {exc.details()}"

        def run_round(planned_round: list[list[Planned]]) -> list[list[pb.ExecuteResponse] | str]:
            with ThreadPoolExecutor(min(len(planned_round), 100)) as pool:
                return list(pool.map(functools.partial(run_batch, planned_round),
                                     range(len(planned_round))))  # fmt: skip

        started = time.monotonic()
        with MemorySampler(daemon.pid) as memory:
            answers = run_round(batches)
        elapsed = time.monotonic() - started
        time.sleep(3)
        after = rss_bytes(daemon.pid)
        # The same load again: memory that keeps growing round after round is a leak; growth that
        # stops after the first (caches filled to their bounds, threads started) is not.
        second = plan_round(2 * total)
        second_answers = run_round(second)
        time.sleep(3)
        after_second = rss_bytes(daemon.pid)
        second_problems = [a for a in second_answers if isinstance(a, str)]

        problems: list[str] = []
        answered: Counter[str] = Counter()
        for planned, got in zip(batches, answers, strict=True):
            if isinstance(got, str):
                problems.append(f"batch failed: {got}")
                continue
            ids = [r.result.tool_use_id for r in got]
            answered.update(ids)
            if ids != [p.tool_use.id for p in planned]:
                problems.append(f"out of order or missing: {ids}")
                continue
            for call, response in zip(planned, got, strict=True):
                text = text_of(response)
                if response.result.is_error or call.expect not in text:
                    problems.append(f"{call.tool_use.name}: wanted {call.expect!r}: {text[:200]}")
                elif call.writes is not None and call.writes.read_text() != call.tool_use.id:
                    problems.append(f"{call.writes} does not hold what was written")
        audit = Counter(str(r["tool_use_id"]) for r in daemon.audit_lines())
        planned_ids = [p.tool_use.id for batch in batches for p in batch]
        twice = [i for i in planned_ids if answered[i] > 1 or audit[i] != 1]
        record(f"{total} concurrent mixed calls, {sessions_count} sessions", total,
               total - len(problems) - len(twice))  # fmt: skip
        sandboxed = sum(1 for b in batches for p in b if p.tool_use.name in ("Bash", "Write"))
        figure(
            "load",
            f"{total} calls ({sandboxed} sandboxed) in {elapsed:.1f} s ({total / elapsed:.0f}/s); "
            f"daemon RSS {baseline / MIB:.0f} MiB before, {memory.peak / MIB:.0f} MiB peak, "
            f"{after / MIB:.0f} MiB after, {after_second / MIB:.0f} MiB after the same load again",
        )
        assert not problems, f"{len(problems)} problems, e.g. {problems[:5]}"
        assert not twice, f"answered or audited other than once: {twice[:5]}"
        assert not second_problems, second_problems[:5]
        assert after - baseline < 64 * MIB, "the daemon's memory grew by more than 64 MiB"
        assert after_second - after < 16 * MIB, "the daemon's memory kept growing with the load"

        for session in sessions:
            stub.CloseSession(pb.CloseSessionRequest(session_id=session.id), timeout=30)
        # The warm pool of the default workspace stays; everything else goes.
        left = settle_containers(instance, keep=pool_size)
        leftovers = [
            p
            for s in sessions
            for p in Path(s.workspace).rglob("*")
            if p.name.endswith(".tmp") or ".tooljail-" in p.name
        ]
        assert left <= pool_size, container_ids(instance)
        assert not leftovers, leftovers
        assert daemon.stop() == 0, daemon.log_text()
        assert settle_containers(instance, keep=0, timeout_s=15) == 0
    finally:
        if daemon.process is not None and daemon.process.poll() is None:
            daemon.process.kill()
            daemon.process.wait()


def _batch_request(planned: list[Planned]) -> pb.ExecuteBatchRequest:
    return pb.ExecuteBatchRequest(
        session_id=planned[0].session, tool_uses=[p.tool_use for p in planned]
    )
