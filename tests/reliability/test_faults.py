"""Faults under load: the policy engine killed, the Docker engine stopped, the daemon killed, the
disk full. Each scenario checks what the client sees, that nothing ran without an allow (audit log
and marker files), and that tooljail recovers by itself."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon.config import PROJECT_ROOT
from tests.integration.harness import RunningDaemon, running_daemon
from tests.reliability.conftest import Figure, Record
from tests.reliability.load import Answer, PacedLoad
from tests.reliability.support import (
    OWNER_GID,
    OWNER_UID,
    DaemonProcess,
    alive,
    children_named,
    container_ids,
    execute,
    scaled,
    settle_containers,
    text_of,
    unique,
    wait_for,
)

pytestmark = pytest.mark.integration

PAYLOAD = "payload-7f3a91 only an allowed Read shows this line"

#: What a call gets while a restarted OPA answers but has not loaded the policy yet (a known bug:
#: see test_deny_while_a_restarted_opa_loads_names_the_policy_engine). Still a deny, so it is
#: counted as surviving here, and reported as a figure.
RESTART_WINDOW_DENY = "data.tooljail.authz.decision is undefined"


def _judge_read(answer: Answer, audit: dict[str, dict[str, object]]) -> str:
    """ "" when a Read answer is consistent (content only with an allow), else what is wrong."""
    if answer.response is None:
        return f"not answered: {answer.status} {answer.details}"
    response = answer.response
    text = text_of(response)
    record = audit.get(answer.tool_use_id)
    if record is None:
        return "no audit record"
    if response.decision.outcome == pb.ALLOW:
        if record["outcome"] != "allow":
            return f"allowed, but audited as {record['outcome']}"
        if response.result.is_error or PAYLOAD not in text:
            return f"allowed without content: {text[:200]}"
        return ""
    if PAYLOAD in text:
        return "content returned without an allow"
    if not response.result.is_error or record["outcome"] == "allow":
        return "a refusal that is not an error, or audited as allow"
    if "policy engine" not in text and RESTART_WINDOW_DENY not in text:
        return f"denied without naming the policy engine: {text[:300]}"
    return ""


def test_opa_killed_during_read_load_fails_closed_then_recovers(
    rel_tmp: Path, record: Record, figure: Figure
) -> None:
    workspace = rel_tmp / "ws-opa-load"
    workspace.mkdir()
    target = workspace / "data.txt"
    target.write_text(PAYLOAD + "\n")
    socket_path = rel_tmp / f"{unique('ok')}.sock"
    duration_s = scaled(4, 30)
    with running_daemon(workspace, socket_path, sandbox={"enabled": False}) as daemon:
        opa = daemon.daemon.opa
        assert opa is not None and opa.pid is not None
        first_pid = opa.pid

        def call(i: int) -> tuple[str, pb.ExecuteResponse]:
            tool_use_id = f"toolu_opa_{i}"
            return tool_use_id, execute(
                daemon.stub, "Read", {"file_path": str(target)}, tool_use_id, timeout=60
            )

        load = PacedLoad(call, rate=200, threads=16)
        load.start()
        time.sleep(duration_s * 0.4)
        killed_at = time.monotonic()
        os.kill(first_pid, signal.SIGKILL)
        time.sleep(duration_s * 0.6)
        answers = load.stop()
        elapsed = load.stopped_at - load.started_at

        assert wait_for(lambda: opa.restarts >= 1 and opa.pid not in (None, first_pid)), (
            "the daemon did not restart OPA"
        )
        after = execute(daemon.stub, "Read", {"file_path": str(target)}, "toolu_opa_after")
        audit = {str(r["tool_use_id"]): r for r in daemon.audit_lines()}

    problems = {a.tool_use_id: _judge_read(a, audit) for a in answers}
    problems = {k: v for k, v in problems.items() if v}
    denied = [a for a in answers if a.response and a.response.decision.outcome != pb.ALLOW]
    post_kill_allows = [
        a
        for a in answers
        if a.response and a.sent_at > killed_at and a.response.decision.outcome == pb.ALLOW
    ]
    record("OPA SIGKILL under 200 calls/s", len(answers), len(answers) - len(problems))
    in_window = [a for a in denied if RESTART_WINDOW_DENY in text_of(a.response)]  # type: ignore[arg-type]
    figure(
        "OPA SIGKILL load",
        f"{len(answers)} Read calls in {elapsed:.1f} s ({len(answers) / elapsed:.0f}/s), "
        f"{len(denied)} denied while OPA was down ({len(in_window)} of them while the restarted "
        "OPA had no policy yet, with a reason that does not name the policy engine)",
    )
    if post_kill_allows:
        recovery = min(a.sent_at for a in post_kill_allows) - killed_at
        figure("OPA SIGKILL recovery", f"first allow {recovery:.2f} s after the kill")
    assert not problems, f"{len(problems)} inconsistent answers, e.g. {list(problems.items())[:5]}"
    assert len(audit) == len(answers) + 1, "every call has exactly one audit record"
    assert denied, "no call observed the outage"
    assert post_kill_allows, "no allow came back while the load ran"
    # Once the restarted OPA answered, the rest of the load was allowed again.
    first_back = min(a.sent_at for a in post_kill_allows)
    late_denies = [a for a in denied if a.sent_at > first_back + 0.5]
    assert not late_denies, (
        f"denies after recovery: {[text_of(a.response) for a in late_denies][:3]}"
    )  # type: ignore[arg-type]
    assert after.decision.outcome == pb.ALLOW and PAYLOAD in text_of(after)


@pytest.mark.xfail(
    strict=True,
    reason="bug: a restarted managed OPA answers before the daemon has loaded the policy into it "
    "(daemon/policy/opa_server.py, _spawn_and_load: _wait_healthy, then _load), and calls in that "
    "window are denied with 'The policy has no decision for this call (...undefined)... Do not "
    "retry it unchanged', which blames the call instead of naming the restarting policy engine",
)
def test_deny_while_a_restarted_opa_loads_names_the_policy_engine(rel_tmp: Path) -> None:
    workspace = rel_tmp / "ws-opa-window"
    workspace.mkdir()
    target = workspace / "data.txt"
    target.write_text(PAYLOAD + "\n")
    socket_path = rel_tmp / f"{unique('ow')}.sock"
    with running_daemon(workspace, socket_path, sandbox={"enabled": False}) as daemon:
        opa = daemon.daemon.opa
        assert opa is not None and opa.pid is not None
        first_pid = opa.pid
        load_policy = opa._load

        async def slow_load(*args: object) -> None:
            # A large policy takes a while to upload and compile: widen the window to see it.
            await asyncio.sleep(1.5)
            await load_policy(*args)  # type: ignore[arg-type]

        opa._load = slow_load  # type: ignore[method-assign]
        os.kill(first_pid, signal.SIGKILL)
        denials: list[str] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            answer = execute(daemon.stub, "Read", {"file_path": str(target)})
            if answer.decision.outcome == pb.ALLOW:
                break
            denials.append(text_of(answer))
            time.sleep(0.02)
        assert opa.restarts >= 1, "OPA was not restarted"
    assert denials, "the outage was not observed"
    misleading = [text for text in denials if "policy engine" not in text]
    assert not misleading, misleading[0]


def _marker_judgement(answer: Answer, marker: Path, audit: dict[str, dict[str, object]]) -> str:
    """ "" when a file-changing call is consistent: its marker exists exactly when it was allowed
    and succeeded; a refusal names the policy engine."""
    if answer.response is None:
        return f"not answered: {answer.status} {answer.details}"
    response = answer.response
    record = audit.get(answer.tool_use_id)
    if record is None:
        return "no audit record"
    allowed = response.decision.outcome == pb.ALLOW
    if allowed != (record["outcome"] == "allow"):
        return f"answer {response.decision.outcome} but audited {record['outcome']}"
    if marker.exists() and not allowed:
        return "the marker exists although the call was not allowed"
    if allowed and not response.result.is_error and not marker.exists():
        return "allowed and successful, but no marker"
    if not allowed:
        text = text_of(response)
        if "policy engine" not in text and RESTART_WINDOW_DENY not in text:
            return f"denied without naming the policy engine: {text[:300]}"
    return ""


@pytest.mark.docker
def test_opa_killed_during_sandboxed_load_runs_nothing_without_an_allow(
    rel_tmp: Path, docker_ready: None, record: Record, figure: Figure
) -> None:
    workspace = rel_tmp / "ws-opa-sbx"
    workspace.mkdir()
    os.chown(workspace, OWNER_UID, OWNER_GID)
    socket_path = rel_tmp / f"{unique('os')}.sock"
    duration_s = scaled(8, 40)
    with running_daemon(workspace, socket_path, sandbox={"pool_size": 2}) as daemon:
        opa = daemon.daemon.opa
        assert opa is not None and opa.pid is not None
        if daemon.daemon.sandbox_executor is None:
            pytest.skip("the daemon found no Docker engine")
        first_pid = opa.pid
        # Writers in one session run one at a time: several sessions make them overlap.
        opened = [daemon.stub.OpenSession(pb.OpenSessionRequest(), timeout=30) for _ in range(4)]
        sessions = [s.id for s in opened]
        folders = {s.id: Path(s.workspace) for s in opened}
        markers: dict[str, Path] = {}

        def call(i: int) -> tuple[str, pb.ExecuteResponse]:
            session = sessions[i % len(sessions)]
            marker = folders[session] / f"m-{i}.txt"
            tool_use_id = f"toolu_sbx_{i}"
            markers[tool_use_id] = marker
            if i % 2:
                name, tool_input = "Bash", {"command": f"echo {i} > {marker}"}
            else:
                name, tool_input = "Write", {"file_path": str(marker), "content": f"{i}\n"}
            return tool_use_id, execute(
                daemon.stub, name, tool_input, tool_use_id, session_id=session, timeout=90
            )

        # Sandboxed calls are slow (a container each): a restart that takes 2 s longer makes
        # sure several of them meet the outage.
        spawn = opa._spawn_and_load

        async def slow_spawn() -> None:
            await asyncio.sleep(2.0)
            await spawn()

        opa._spawn_and_load = slow_spawn  # type: ignore[method-assign]
        load = PacedLoad(call, rate=20, threads=len(sessions))
        load.start()
        time.sleep(duration_s * 0.3)
        killed_at = time.monotonic()
        os.kill(first_pid, signal.SIGKILL)
        time.sleep(duration_s * 0.7)
        answers = load.stop()
        assert wait_for(lambda: opa.restarts >= 1), "the daemon did not restart OPA"
        audit = {str(r["tool_use_id"]): r for r in daemon.audit_lines()}

    problems = {
        a.tool_use_id: _marker_judgement(a, markers.get(a.tool_use_id, Path("/nonexistent")), audit)
        for a in answers
    }
    problems = {k: v for k, v in problems.items() if v}
    allowed = [a for a in answers if a.response and a.response.decision.outcome == pb.ALLOW]
    denied = [a for a in answers if a.response and a.response.decision.outcome != pb.ALLOW]
    record("OPA SIGKILL during Write/Bash load", len(answers), len(answers) - len(problems))
    figure(
        "OPA SIGKILL sandboxed load",
        f"{len(answers)} Write/Bash calls, {len(allowed)} allowed (markers written), "
        f"{len(denied)} denied (no marker)",
    )
    assert not problems, f"{len(problems)} inconsistent answers: {list(problems.items())[:5]}"
    assert denied, "no call observed the outage"
    assert any(a.sent_at > killed_at for a in allowed), "no allow came back after the restart"
    written = {p for folder in folders.values() for p in folder.glob("m-*.txt")}
    expected = {markers[a.tool_use_id] for a in allowed if not a.response.result.is_error}  # type: ignore[union-attr]
    assert written == expected, "marker files differ from the allowed, successful calls"


@pytest.mark.docker
def test_daemon_sigkill_with_sandboxed_calls_in_flight_then_restart(
    rel_tmp: Path, docker_ready: None, record: Record, figure: Figure
) -> None:
    folder = rel_tmp / "sigkill"
    folder.mkdir()
    workspace = folder / "ws"
    workspace.mkdir()
    os.chown(workspace, OWNER_UID, OWNER_GID)
    kept = workspace / "kept.txt"
    kept.write_text("written before the crash\n")
    instance = unique("rel-kill")
    # No warm pool: after the restart, every container of the instance is a leftover.
    pool_size = 0
    env = {"TOOLJAIL_SANDBOX__POOL_SIZE": str(pool_size), "TOOLJAIL_SHUTDOWN_GRACE_S": "5"}
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

        # What the clients saw: the connection went away, not an answer.
        assert seen == [grpc.StatusCode.UNAVAILABLE] * in_flight, seen
        assert len(old_containers) >= in_flight
        assert opa_pids and wait_for(lambda: not any(alive(p) for p in opa_pids), 15), (
            "the killed daemon's OPA outlived it"
        )

        restarted_at = time.monotonic()
        second.start()
        assert second.stub is not None
        reaped = wait_for(lambda: not container_ids(instance) & old_containers, timeout_s=30)
        reap_s = time.monotonic() - restarted_at
        left = settle_containers(instance, keep=pool_size)
        record(
            "daemon SIGKILL, 20 sandboxed calls in flight",
            in_flight,
            sum(1 for s in sessions if not (Path(s.workspace) / "finished.txt").exists()),
        )
        figure(
            "daemon SIGKILL restart",
            f"leftovers of the killed daemon gone {reap_s:.1f} s after restart",
        )
        assert reaped, f"leftovers not reaped: {container_ids(instance) & old_containers}"
        assert left <= pool_size

        served = execute(second.stub, "Read", {"file_path": str(kept)})
        assert served.decision.outcome == pb.ALLOW and "written before the crash" in text_of(served)
        bash = execute(second.stub, "Bash", {"command": "echo alive"})
        assert text_of(bash).strip() == "alive", text_of(bash)
        with pytest.raises(grpc.RpcError) as forgotten:
            execute(second.stub, "LS", {"path": sessions[0].workspace}, session_id=sessions[0].id)
        assert forgotten.value.code() == grpc.StatusCode.INVALID_ARGUMENT
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
            from sandbox.docker_backend import DockerBackend

            asyncio.run(DockerBackend.reap_instance(instance))


@pytest.mark.xfail(
    strict=True,
    reason="gap: the audit record of a call is written only when it finishes "
    "(daemon/pipeline.py, Pipeline._finish), so a call that runs when the daemon is killed leaves "
    "no record of its allow: after a crash nothing proves it was decided",
)
@pytest.mark.docker
def test_a_running_call_is_already_in_the_audit_log(rel_sandbox: RunningDaemon) -> None:
    tool_use_id = unique("toolu_audit_first")
    future = rel_sandbox.stub.Execute.future(
        pb.ExecuteRequest(tool_use=_bash_use(tool_use_id, "sleep 4")), timeout=60
    )
    try:
        time.sleep(2.0)
        assert not future.done()
        records = [r for r in rel_sandbox.audit_lines() if r["tool_use_id"] == tool_use_id]
        assert records and records[0]["outcome"] == "allow"
    finally:
        future.result()


def _bash_use(tool_use_id: str, command: str) -> pb.ToolUse:
    use = pb.ToolUse(id=tool_use_id, name="Bash")
    use.input.update({"command": command})
    return use


def _mount_tmpfs(folder: Path, size: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},uid={OWNER_UID},gid={OWNER_GID},mode=0755",
         "tmpfs", str(folder)],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip()}")


def _unmount(folder: Path) -> None:
    done = subprocess.run(["umount", str(folder)], capture_output=True, timeout=30, check=False)
    if done.returncode != 0:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True, timeout=30, check=False)


@pytest.mark.docker
# aiohttp warns when the daemon sends OPA a body over 1 MiB (the Write's content is in the policy
# input); in this in-process daemon pytest would turn that warning into an error, i.e. a deny.
@pytest.mark.filterwarnings("ignore:Sending a large body:ResourceWarning")
def test_disk_full_during_write_is_a_clear_error_and_keeps_the_original(
    rel_tmp: Path, docker_ready: None, record: Record
) -> None:
    workspace = rel_tmp / "ws-full"
    workspace.mkdir()
    os.chown(workspace, OWNER_UID, OWNER_GID)
    small = workspace / "small"
    small.mkdir()
    # Mounted before the daemon starts: a container only sees mounts that existed when it was made.
    _mount_tmpfs(small, "1m")
    try:
        original = small / "notes.txt"
        original.write_text("original content\n")
        os.chown(original, OWNER_UID, OWNER_GID)
        big = "x" * (2 << 20)
        socket_path = rel_tmp / f"{unique('df')}.sock"
        with running_daemon(workspace, socket_path, sandbox={"pool_size": 1}) as daemon:
            if daemon.daemon.sandbox_executor is None:
                pytest.skip("the daemon found no Docker engine")
            assert not daemon.execute("Read", {"file_path": str(original)}).result.is_error
            over = daemon.execute("Write", {"file_path": str(original), "content": big})
            fresh = daemon.execute("Write", {"file_path": str(small / "new.txt"), "content": big})
            attempts = [over, fresh]
            survived = sum(
                1
                for answer in attempts
                if answer.result.is_error and "no space left" in text_of(answer)
            )
            record("disk full during Write (1 MB tmpfs, 2 MB file)", len(attempts), survived)
            assert over.result.is_error and "no space left" in text_of(over), text_of(over)
            assert "notes.txt" in text_of(over)
            assert fresh.result.is_error and "no space left" in text_of(fresh), text_of(fresh)
            assert original.read_text() == "original content\n"
            assert sorted(p.name for p in small.iterdir()) == ["notes.txt"], "leftovers"
            # Once there is room again, writing works: nothing stays broken.
            small_write = daemon.execute(
                "Write", {"file_path": str(original), "content": "smaller\n"}
            )
            assert not small_write.result.is_error, text_of(small_write)
            assert original.read_text() == "smaller\n"
    finally:
        _unmount(small)


def _dockerd_pid() -> int:
    """The engine started by scripts/ensure-docker.sh (its pid file), or a skip."""
    pid_file = Path(os.environ.get("DOCKERD_PIDFILE", "/var/run/docker.pid"))
    try:
        pid = int(pid_file.read_text().strip())
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except (OSError, ValueError):
        pytest.skip(f"no dockerd pid in {pid_file}: start the engine with scripts/ensure-docker.sh")
    if comm != "dockerd":
        pytest.skip(f"pid {pid} from {pid_file} is {comm}, not dockerd")
    return pid


def _start_docker() -> None:
    subprocess.run(
        [str(PROJECT_ROOT / "scripts" / "ensure-docker.sh")],
        check=True, timeout=180, capture_output=True,
    )  # fmt: skip


@pytest.mark.docker
@pytest.mark.skipif(
    os.environ.get("TOOLJAIL_CHAOS_DOCKER") != "1",
    reason="stops and restarts the machine's Docker engine, which breaks every other Docker user "
    "of it: set TOOLJAIL_CHAOS_DOCKER=1 only on a machine (or engine) of your own",
)
def test_docker_engine_stopped_mid_load_then_started(
    rel_tmp: Path, docker_ready: None, record: Record, figure: Figure
) -> None:
    dockerd = _dockerd_pid()
    workspace = rel_tmp / "ws-dockerd"
    workspace.mkdir()
    os.chown(workspace, OWNER_UID, OWNER_GID)
    readable = workspace / "data.txt"
    readable.write_text(PAYLOAD + "\n")
    os.chown(workspace, OWNER_UID, OWNER_GID)
    socket_path = rel_tmp / f"{unique('dk')}.sock"
    phases: dict[str, tuple[float, float]] = {}
    try:
        with running_daemon(workspace, socket_path, sandbox={"pool_size": 2}) as daemon:
            executor = daemon.daemon.sandbox_executor
            if executor is None:
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
            os.kill(dockerd, signal.SIGTERM)
            assert wait_for(lambda: not alive(dockerd), timeout_s=60), "dockerd did not stop"
            time.sleep(3)
            started_at = time.monotonic()
            phases["down"] = (stopped_at, started_at)
            _start_docker()
            assert wait_for(lambda: executor.stats().pooled >= 1, timeout_s=90), (
                "the warm pool did not refill"
            )
            refilled_s = time.monotonic() - started_at
            time.sleep(2)
            read_answers = reads.stop()
            write_answers = writes.stop()
            after = daemon.execute("Bash", {"command": "echo back"})
    finally:
        with contextlib.suppress(Exception):
            _start_docker()  # never leave the machine without its engine

    read_ok = [
        a
        for a in read_answers
        if a.response and a.response.decision.outcome == pb.ALLOW and PAYLOAD in text_of(a.response)
    ]
    clear = []
    for answer in write_answers:
        response = answer.response
        if response is None:
            continue
        marker = marker_of[answer.tool_use_id]
        if response.result.is_error:
            if "sandbox" in text_of(response).lower() and not marker.exists():
                clear.append(answer)
        elif marker.exists():
            clear.append(answer)
    record("Docker stopped: read-only calls", len(read_answers), len(read_ok))
    record("Docker stopped: sandboxed calls", len(write_answers), len(clear))
    figure("Docker engine restart", f"warm pool refilled {refilled_s:.1f} s after dockerd started")
    assert len(read_ok) == len(read_answers), "read-only calls failed while Docker was down"
    assert len(clear) == len(write_answers), "sandboxed answers without a clear error or marker"
    down_from, down_to = phases["down"]
    failed_while_down = [
        a
        for a in write_answers
        if a.response and down_from + 1 < a.sent_at < down_to and a.response.result.is_error
    ]
    assert failed_while_down, "no sandboxed call observed the outage"
    assert text_of(after).strip() == "back"
    assert Counter(a.status for a in write_answers) == Counter({None: len(write_answers)})
