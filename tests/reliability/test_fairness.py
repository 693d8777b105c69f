"""Fairness under abuse: one session floods `tooljail serve` with the most expensive inputs a
model can send (a Read of one huge line, Globs with thousands of brace alternatives and braces
nested thousands deep, an Edit whose replace_all would produce a gigantic file, Bash printing
as fast as it can, all in parallel batches), while another session's Read, Grep and Bash calls
are timed. The other session keeps being served within the bounds below, and the daemon's
memory stays bounded.

The bounds are starvation bounds, not speed goals (those are in `make bench`): on this 2-core
machine an unloaded Read answers in about 10 ms and a Bash call in about 30 ms; the bounds are
two orders of magnitude above that, so only a call that waits for the flood fails them.
"""

from __future__ import annotations

import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from tests.reliability.conftest import Figure, Record
from tests.reliability.support import (
    DaemonProcess,
    owned_workspace,
    rss_bytes,
    scaled,
    text_of,
    tool_use,
    unique,
)

pytestmark = [pytest.mark.integration, pytest.mark.docker]

#: Published in the README's reliability table.
P99_BOUND_S = {"Read": 2.0, "Grep": 2.0, "Bash": 5.0}
RSS_GROWTH_BOUND = 768 << 20
MIB = 1 << 20


def _flood_batch(workspace: str, n: int) -> list[pb.ToolUse]:
    braces = "{" + ",".join(f"a{i}" for i in range(2_000)) + "}"
    return [
        tool_use("Read", {"file_path": f"{workspace}/many-a.txt"}),  # so the Edit may run
        tool_use("Read", {"file_path": f"{workspace}/huge-line.txt"}),
        tool_use("Glob", {"pattern": f"**/{braces}*", "path": workspace}),
        tool_use("Glob", {"pattern": "{" * 3_000 + "x" + "}" * 3_000, "path": workspace}),
        tool_use("Grep", {"pattern": "(a|aa)*b", "path": workspace, "output_mode": "count"}),
        tool_use(
            "Edit",
            {
                "file_path": f"{workspace}/many-a.txt",
                "old_string": "a",
                "new_string": "b" * 10_000,
                "replace_all": True,
            },
        ),
        tool_use("Bash", {"command": f"yes flood-{n} | head -c 50000000"}),
    ]


def test_one_session_flooding_does_not_starve_another(
    rel_tmp: Path, record: Record, figure: Figure
) -> None:
    folder = rel_tmp / unique("fair")
    folder.mkdir()
    workspace = owned_workspace(folder / "ws")
    daemon = DaemonProcess(folder, workspace, unique("fair"))
    daemon.start()
    try:
        assert daemon.stub is not None
        stub = daemon.stub
        flood = stub.OpenSession(pb.OpenSessionRequest(), timeout=60)
        victim = stub.OpenSession(pb.OpenSessionRequest(), timeout=60)
        fws, vws = Path(flood.workspace), Path(victim.workspace)
        # One line of 64 MiB, and a file of 200,000 `a`s (replace_all would make 2 GB).
        with (fws / "huge-line.txt").open("w") as out:
            for _ in range(64):
                out.write("x" * MIB)
        (fws / "many-a.txt").write_text("a" * 200_000)
        (vws / "notes.txt").write_text("victim notes\n" * 100)
        baseline = rss_bytes(daemon.pid)

        stop = threading.Event()
        flood_answers: list[str] = []

        def flooding(worker: int) -> None:
            n = 0
            while not stop.is_set():
                n += 1
                request = pb.ExecuteBatchRequest(
                    session_id=flood.id, tool_uses=_flood_batch(str(fws), worker * 1000 + n)
                )
                try:
                    for answer in stub.ExecuteBatch(request, timeout=300):
                        flood_answers.append("error" if answer.result.is_error else "ok")
                except grpc.RpcError as exc:
                    flood_answers.append(exc.code().name)

        timings: dict[str, list[float]] = {"Read": [], "Grep": [], "Bash": []}
        wrong: list[str] = []
        calls = {
            "Read": ("Read", {"file_path": str(vws / "notes.txt"), "limit": 5}, "victim notes"),
            "Grep": ("Grep", {"pattern": "victim", "path": str(vws)}, "notes.txt"),
            "Bash": ("Bash", {"command": "echo victim-alive"}, "victim-alive"),
        }
        rounds = scaled(15, 60)
        peak = baseline
        with ThreadPoolExecutor(max_workers=3) as pool:
            for worker in range(3):
                pool.submit(flooding, worker)
            time.sleep(3)  # the flood is in full swing
            for _ in range(rounds):
                for kind, (name, tool_input, expect) in calls.items():
                    started = time.monotonic()
                    answer = stub.Execute(
                        pb.ExecuteRequest(
                            session_id=victim.id, tool_use=tool_use(name, tool_input)
                        ),
                        timeout=120,
                    )
                    timings[kind].append(time.monotonic() - started)
                    if answer.result.is_error or expect not in text_of(answer):
                        wrong.append(f"{kind}: {text_of(answer)[:200]}")
                peak = max(peak, rss_bytes(daemon.pid))
            stop.set()
        p99 = {kind: _p99(values) for kind, values in timings.items()}
        growth = peak - baseline
        held = sum(
            1 for kind, values in timings.items() for value in values if value <= P99_BOUND_S[kind]
        )
        record("another session's calls during a flood of costly calls", 3 * rounds, held)
        for kind in timings:
            median_ms = statistics.median(timings[kind]) * 1000
            figure(
                f"fairness: {kind} p99 under a flood (bound {P99_BOUND_S[kind]:g} s)",
                f"{p99[kind] * 1000:.0f} ms (median {median_ms:.0f} ms)",
            )
        figure(
            f"fairness: daemon memory growth under the flood (bound {RSS_GROWTH_BOUND // MIB} MiB)",
            f"{growth // MIB} MiB; flood answers: {len(flood_answers)}",
        )
        assert not wrong, wrong[:5]
        for kind, value in p99.items():
            assert value <= P99_BOUND_S[kind], (kind, value, timings[kind])
        assert growth <= RSS_GROWTH_BOUND, growth // MIB
        assert flood_answers and all(a in ("ok", "error") for a in flood_answers), set(
            flood_answers
        )
        assert daemon.process is not None and daemon.process.poll() is None, "the daemon lives"
    finally:
        daemon.stop()


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
