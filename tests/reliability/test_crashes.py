"""Crashes of the processes tooljail runs with: the daemon killed with SIGKILL while sandboxed
calls run (then restarted on the same socket), and the Docker engine stopped under load (then
started). Each checks what the client sees, that nothing ran on unrecorded, and the recovery."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from sandbox.docker_backend import DockerBackend
from sandbox.executor import ExecutorStats
from sandbox.image import default_image_ref
from tests.integration.harness import RunningDaemon, running_daemon
from tests.reliability.conftest import Figure, Record
from tests.reliability.load import Answer, PacedLoad
from tests.reliability.private_engine import PrivateEngine, private_engine
from tests.reliability.support import (
    DaemonProcess,
    alive,
    children_named,
    container_ids,
    execute,
    owned_workspace,
    settle_containers,
    text_of,
    unique,
    wait_for,
)

pytestmark = pytest.mark.integration

PAYLOAD = "payload-3b07 only an allowed Read shows this line"


@pytest.mark.docker
def test_daemon_sigkill_with_sandboxed_calls_in_flight_then_restart(
    rel_tmp: Path, docker_ready: None, record: Record, figure: Figure
) -> None:
    folder = rel_tmp / "sigkill"
    workspace = owned_workspace(folder / "ws")
    kept = workspace / "kept.txt"
    kept.write_text("written before the crash\n")
    instance = unique("rel-kill")
    # No warm pool: after the restart, every container of the instance is a leftover.
    pool_size = 0
    env = {
        "TOOLJAIL_SANDBOX__POOL_SIZE": str(pool_size),
        "TOOLJAIL_SHUTDOWN_GRACE_S": "5",
        # One principal's 20 calls of 512 MB pass its default half of the memory budget here.
        "TOOLJAIL_SANDBOX__MEMORY_PER_PRINCIPAL": "1.0",
    }
    first = DaemonProcess(folder, workspace, instance, env)
    second = DaemonProcess(folder, workspace, instance, env)
    in_flight = 20
    try:
        first.start()
        assert first.stub is not None
        stub = first.stub
        sessions = [stub.OpenSession(pb.OpenSessionRequest(), timeout=30) for _ in range(in_flight)]
        for session in sessions:
            (Path(session.workspace) / "before.txt").write_text(session.id)

        def slow_call(session: pb.Session) -> grpc.StatusCode | str:
            command = (
                f"echo started > {session.workspace}/started.txt; sleep 40; "
                f"echo finished > {session.workspace}/finished.txt"
            )
            try:
                answer = execute(stub, "Bash", {"command": command}, session_id=session.id)
            except grpc.RpcError as exc:
                return exc.code()
            return text_of(answer)

        with ThreadPoolExecutor(max_workers=in_flight) as pool:
            futures: list[Future[grpc.StatusCode | str]] = [
                pool.submit(slow_call, s) for s in sessions
            ]
            started = [Path(s.workspace) / "started.txt" for s in sessions]
            assert wait_for(lambda: all(p.exists() for p in started), timeout_s=90), (
                f"not all {in_flight} calls started: {sum(p.exists() for p in started)} did"
            )
            assert first.status().in_flight == in_flight
            old_containers = container_ids(instance)
            opa_pids = children_named(first.pid, "opa")
            first.kill()
            seen = [f.result(timeout=60) for f in futures]

        # What the clients saw: the connection went away, not an answer. Which of the two
        # transport statuses a client gets for a peer that vanished is the transport's choice.
        answered = [s for s in seen if not isinstance(s, grpc.StatusCode)]
        assert answered == [], f"killed calls reported an answer: {answered}"
        assert set(seen) <= {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED}, seen
        assert len(old_containers) >= in_flight
        assert opa_pids and wait_for(lambda: not any(alive(p) for p in opa_pids), 15), (
            "the killed daemon's OPA outlived it"
        )

        restarted_at = time.monotonic()
        second.start()
        serving_s = time.monotonic() - restarted_at
        assert second.stub is not None
        reaped = wait_for(lambda: not container_ids(instance) & old_containers, timeout_s=30)
        reap_s = time.monotonic() - restarted_at
        left = settle_containers(instance, keep=pool_size)
        record(
            "daemon SIGKILL, 20 sandboxed calls in flight",
            in_flight,
            sum(1 for s in sessions if not (Path(s.workspace) / "finished.txt").exists()),
        )
        decided = audited_killed(second, sessions, "decided")
        answered_on_file = audited_killed(second, sessions, "answered")
        figure(
            "daemon SIGKILL restart",
            f"the new daemon served {serving_s:.1f} s after it was started (it reaps first); the "
            f"{len(old_containers)} containers of the killed one were gone after {reap_s:.1f} s; "
            f"'decided' audit records of the {in_flight} killed calls: {decided}, 'answered': "
            f"{answered_on_file}",
        )
        assert (decided, answered_on_file) == (in_flight, 0), "every killed call must be on file"
        assert reaped, f"leftovers not reaped: {container_ids(instance) & old_containers}"
        assert left <= pool_size

        served = execute(second.stub, "Read", {"file_path": str(kept)})
        assert served.decision.outcome == pb.ALLOW and "written before the crash" in text_of(served)
        bash = execute(second.stub, "Bash", {"command": "echo alive"})
        assert text_of(bash).strip() == "alive", text_of(bash)
        with pytest.raises(grpc.RpcError) as forgotten:
            execute(second.stub, "LS", {"path": sessions[0].workspace}, session_id=sessions[0].id)
        assert forgotten.value.code() == grpc.StatusCode.NOT_FOUND
        assert "unknown session" in (forgotten.value.details() or "")

        # Workspaces intact; the killed calls never got to their last step.
        assert kept.read_text() == "written before the crash\n"
        for session in sessions:
            ws = Path(session.workspace)
            assert (ws / "before.txt").read_text() == session.id
            assert (ws / "started.txt").read_text() == "started\n"
            assert not (ws / "finished.txt").exists()
            assert not list(ws.glob(".*.tmp")), "a temporary file of a write was left"
        assert second.stop() == 0, second.log_text()
        assert settle_containers(instance, keep=0, timeout_s=15) == 0
    finally:
        for daemon in (first, second):
            if daemon.process is not None and daemon.process.poll() is None:
                daemon.process.kill()
                daemon.process.wait()
        with contextlib.suppress(Exception):
            asyncio.run(DockerBackend.reap_instance(instance))


def audited_killed(daemon: DaemonProcess, sessions: list[pb.Session], event: str) -> int:
    """Audit records of Bash calls in these sessions (the killed daemon's in-flight calls)."""
    ids = {s.id for s in sessions}
    return sum(1 for r in daemon.audit_lines(event) if r["session"] in ids and r["tool"] == "Bash")


@pytest.mark.docker
def test_a_running_call_is_already_in_the_audit_log(rel_sandbox: RunningDaemon) -> None:
    tool_use_id = unique("toolu_audit_first")
    future = rel_sandbox.stub.Execute.future(
        pb.ExecuteRequest(
            tool_use=_bash_use(tool_use_id, "echo started > /tmp/started && sleep 4")
        ),
        timeout=60,
    )
    try:
        time.sleep(2.0)
        assert not future.done()
        records = [r for r in rel_sandbox.audit_lines(None) if r["tool_use_id"] == tool_use_id]
        assert [(r["event"], r["outcome"]) for r in records] == [("decided", "allow")]
        assert records[0]["decision_id"] and records[0]["input"] == {
            "command": "echo started > /tmp/started && sleep 4"
        }
    finally:
        answer = future.result()
    records = [r for r in rel_sandbox.audit_lines(None) if r["tool_use_id"] == tool_use_id]
    assert [r["event"] for r in records] == ["decided", "answered"]
    decided, answered = records
    assert decided["decision_id"] == answered["decision_id"] == answer.decision.decision_id
    assert decided["input_sha256"] == answered["input_sha256"]


def _bash_use(tool_use_id: str, command: str) -> pb.ToolUse:
    use = pb.ToolUse(id=tool_use_id, name="Bash")
    use.input.update({"command": command})
    return use


@pytest.mark.docker
def test_docker_engine_stopped_mid_load_then_started(
    rel_tmp: Path, docker_ready: None, record: Record, figure: Figure,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    workspace = owned_workspace(rel_tmp / "ws-dockerd")
    readable = workspace / "data.txt"
    readable.write_text(PAYLOAD + "\n")
    image = os.environ.get("TOOLJAIL_SANDBOX_IMAGE") or default_image_ref()
    host_interfaces = set(os.listdir("/sys/class/net"))
    # An engine of the test's own: stopping the machine's engine would break its other users.
    with private_engine(image) as engine:
        monkeypatch.setenv("DOCKER_HOST", engine.host)
        outage = _engine_outage(workspace, rel_tmp / f"{unique('dk')}.sock", engine)
    assert set(os.listdir("/sys/class/net")) == host_interfaces, "the host's network changed"
    read_answers, write_answers = outage.reads, outage.writes
    marker_of, refilled_s, after = outage.markers, outage.refilled_s, outage.after
    read_ok = [
        a
        for a in read_answers
        if a.response and a.response.decision.outcome == pb.ALLOW and PAYLOAD in text_of(a.response)
    ]
    clear = []
    unclear = []
    for answer in write_answers:
        response = answer.response
        if response is None:
            unclear.append(f"{answer.tool_use_id}: no answer ({answer.status})")
            continue
        marker = marker_of[answer.tool_use_id]
        text = text_of(response)
        if response.result.is_error:
            # An engine stopped mid-command may kill it after its effect: honest answers say
            # nothing changed only when nothing did, and otherwise that it may have run.
            may_have_run = "partly carried out" in text
            if "sandbox" in text.lower() and (may_have_run or not marker.exists()):
                clear.append(answer)
            else:
                unclear.append(f"{answer.tool_use_id} (marker {marker.exists()}): {text[:300]}")
        elif marker.exists():
            clear.append(answer)
        else:
            unclear.append(f"{answer.tool_use_id}: succeeded without its marker: {text[:200]}")
    record("Docker stopped: read-only calls", len(read_answers), len(read_ok))
    record("Docker stopped: sandboxed calls", len(write_answers), len(clear))
    figure("Docker engine restart", f"warm pool refilled {refilled_s:.1f} s after dockerd started")
    assert len(read_ok) == len(read_answers), "read-only calls failed while Docker was down"
    assert not unclear, unclear
    down_from, down_to = outage.down
    failed_while_down = [
        a
        for a in write_answers
        if a.response and down_from + 1 < a.sent_at < down_to and a.response.result.is_error
    ]
    assert failed_while_down, "no sandboxed call observed the outage"
    assert text_of(after).strip() == "back"
    assert Counter(a.status for a in write_answers) == Counter({None: len(write_answers)})


@dataclass
class _Outage:
    """What the load saw around a stopped and restarted Docker engine."""

    reads: list[Answer]
    writes: list[Answer]
    markers: dict[str, Path]
    down: tuple[float, float]
    refilled_s: float
    after: pb.ExecuteResponse


def _engine_outage(workspace: Path, socket_path: Path, engine: PrivateEngine) -> _Outage:
    """Reads and Bash calls while dockerd is stopped, then started again. A function of its own,
    so that nothing of the daemon outlives it."""
    readable = workspace / "data.txt"
    with running_daemon(workspace, socket_path, sandbox={"pool_size": 2}) as daemon:
        sandbox = daemon.daemon.sandbox
        if sandbox is None or sandbox.stats() is None:
            pytest.skip("the daemon found no Docker engine")
        marker_of: dict[str, Path] = {}

        def read_call(i: int) -> tuple[str, pb.ExecuteResponse]:
            tool_use_id = f"toolu_dr_{i}"
            return tool_use_id, execute(
                daemon.stub, "Read", {"file_path": str(readable)}, tool_use_id
            )

        def sandboxed_call(i: int) -> tuple[str, pb.ExecuteResponse]:
            tool_use_id = f"toolu_ds_{i}"
            marker = workspace / f"m-{i}.txt"
            marker_of[tool_use_id] = marker
            return tool_use_id, execute(
                daemon.stub, "Bash", {"command": f"echo {i} > {marker}"}, tool_use_id
            )

        reads = PacedLoad(read_call, rate=50, threads=4)
        writes = PacedLoad(sandboxed_call, rate=4, threads=1)
        reads.start()
        writes.start()
        time.sleep(3)
        stopped_at = time.monotonic()
        engine.stop()
        time.sleep(3)
        started_at = time.monotonic()
        engine.start()
        assert wait_for(lambda: (sandbox.stats() or ExecutorStats()).pooled >= 1, timeout_s=90), (
            "the warm pool did not refill"
        )
        refilled_s = time.monotonic() - started_at
        time.sleep(2)
        outage = _Outage(
            reads=reads.stop(),
            writes=writes.stop(),
            markers=marker_of,
            down=(stopped_at, started_at),
            refilled_s=refilled_s,
            after=daemon.execute("Bash", {"command": "echo back"}),
        )
        instance = daemon.daemon.instance_id
    # Containers lost with the engine included: nothing of this daemon is left.
    assert settle_containers(instance, keep=0, timeout_s=30) == 0, container_ids(instance)
    return outage
