"""Faults under load: the policy engine killed while calls pour in, and the disk full during a
Write. Each scenario checks what the client sees, that nothing ran without an allow (audit log and
marker files), and that tooljail recovers by itself. Crashes of the daemon and of the Docker
engine are in test_crashes.py."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon.policy.loader import PolicyFiles
from tests.integration.harness import running_daemon
from tests.reliability.conftest import Figure, Record
from tests.reliability.load import Answer, PacedLoad
from tests.reliability.support import (
    OWNER_GID,
    OWNER_UID,
    execute,
    owned_workspace,
    scaled,
    text_of,
    unique,
    wait_for,
)

pytestmark = pytest.mark.integration

PAYLOAD = "payload-7f3a91 only an allowed Read shows this line"


def _text(answer: Answer) -> str:
    return text_of(answer.response) if answer.response is not None else ""


def _judge_read(answer: Answer, audit: dict[str, dict[str, object]]) -> str:
    """What is wrong with a Read answer; empty when it is consistent (content only if allowed)."""
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
    if "policy engine" not in text:
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
        # A loaded machine restarts OPA later: the load runs on until OPA is back and a while
        # after, so that calls meet the restarted engine however long the restart took.
        restarted = wait_for(
            lambda: opa.restarts >= 1 and opa.pid not in (None, first_pid) and not opa.loading,
            timeout_s=120,
        )
        time.sleep(duration_s * 0.2)
        answers = load.stop()
        elapsed = load.stopped_at - load.started_at
        assert restarted, "the daemon did not restart OPA"
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
    figure(
        "OPA SIGKILL load",
        f"{len(answers)} Read calls in {elapsed:.1f} s ({len(answers) / elapsed:.0f}/s), "
        f"{len(denied)} denied while OPA was down",
    )
    # Until the daemon notices the exit, reads keep their reused decisions (the policy allows
    # reuse for read-only calls); from then on everything is denied until OPA is back.
    first_deny = min((a.sent_at for a in denied if a.sent_at > killed_at), default=killed_at)
    back = [a for a in post_kill_allows if a.sent_at > first_deny]
    if back:
        recovery = min(a.sent_at for a in back) - killed_at
        noticed = first_deny - killed_at
        figure(
            "OPA SIGKILL recovery",
            f"denies from {noticed:.2f} s after the kill, first allow again {recovery:.2f} s "
            "after it",
        )
    assert not problems, f"{len(problems)} inconsistent answers, e.g. {list(problems.items())[:5]}"
    assert len(audit) == len(answers) + 1, "every call has exactly one audit record"
    assert denied, "no call observed the outage"
    assert back, "no allow came back while the load ran"
    # Once the restarted OPA answered, the rest of the load was allowed again.
    first_back = min(a.sent_at for a in back)
    late_denies = [a for a in denied if a.sent_at > first_back + 0.5]
    assert not late_denies, f"denies after recovery: {[_text(a) for a in late_denies][:3]}"
    assert after.decision.outcome == pb.ALLOW and PAYLOAD in text_of(after)


def test_deny_while_a_restarted_opa_loads_names_the_policy_engine(rel_tmp: Path) -> None:
    """Between a restarted OPA answering and holding the policy again, a deny still says the
    policy engine is restarting (not that the call has no decision)."""
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

        async def slow_load(files: PolicyFiles, previous: PolicyFiles | None = None) -> None:
            # A large policy takes a while to upload and compile: widen the window to see it.
            await asyncio.sleep(1.5)
            await load_policy(files, previous)

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
    """What is wrong with a file-changing call; empty when its marker exists exactly when it was
    allowed and succeeded, and a refusal names the policy engine."""
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
        if "policy engine" not in text:
            return f"denied without naming the policy engine: {text[:300]}"
    return ""


@pytest.mark.docker
def test_opa_killed_during_sandboxed_load_runs_nothing_without_an_allow(
    rel_tmp: Path, docker_ready: None, record: Record, figure: Figure
) -> None:
    workspace = owned_workspace(rel_tmp / "ws-opa-sbx")
    socket_path = rel_tmp / f"{unique('os')}.sock"
    duration_s = scaled(8, 40)
    with running_daemon(workspace, socket_path, sandbox={"pool_size": 2}) as daemon:
        opa = daemon.daemon.opa
        assert opa is not None and opa.pid is not None
        if daemon.daemon.sandbox is None or daemon.daemon.sandbox.stats() is None:
            pytest.skip("the daemon found no Docker engine")
        first_pid = opa.pid
        # Writers in one session run one at a time: several sessions make them overlap.
        opened = [daemon.stub.OpenSession(pb.OpenSessionRequest(), timeout=30) for _ in range(4)]
        sessions = [s.id for s in opened]
        folders = {s.id: Path(s.workspace) for s in opened}
        markers: dict[str, Path] = {}

        outage_seen = threading.Event()

        def call(i: int) -> tuple[str, pb.ExecuteResponse]:
            session = sessions[i % len(sessions)]
            marker = folders[session] / f"m-{i}.txt"
            tool_use_id = f"toolu_sbx_{i}"
            markers[tool_use_id] = marker
            if i % 2:
                name, tool_input = "Bash", {"command": f"echo {i} > {marker}"}
            else:
                name, tool_input = "Write", {"file_path": str(marker), "content": f"{i}\n"}
            response = execute(
                daemon.stub, name, tool_input, tool_use_id, session_id=session, timeout=90
            )
            if response.decision.outcome != pb.ALLOW:
                outage_seen.set()
            return tool_use_id, response

        # Sandboxed calls are slow (a container each, seconds on a loaded machine): the restart
        # waits until some call met the outage (at most 60 s), however long the calls take.
        spawn = opa._spawn_and_load

        async def slow_spawn() -> None:
            deadline = time.monotonic() + 60
            while not outage_seen.is_set() and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            await spawn()

        opa._spawn_and_load = slow_spawn  # type: ignore[method-assign]
        load = PacedLoad(call, rate=20, threads=len(sessions))
        load.start()
        time.sleep(duration_s * 0.3)
        killed_at = time.monotonic()
        os.kill(first_pid, signal.SIGKILL)
        time.sleep(duration_s * 0.3)
        # The load runs on until OPA is back and a while after, so allows come back too.
        restarted = wait_for(
            lambda: opa.restarts >= 1 and opa.pid not in (None, first_pid) and not opa.loading,
            timeout_s=120,
        )
        time.sleep(duration_s * 0.4)
        answers = load.stop()
        assert restarted, "the daemon did not restart OPA"
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
    expected = {
        markers[a.tool_use_id]
        for a in allowed
        if a.response is not None and not a.response.result.is_error
    }
    assert written == expected, "marker files differ from the allowed, successful calls"


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
    workspace = owned_workspace(rel_tmp / "ws-full")
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
            if daemon.daemon.sandbox is None or daemon.daemon.sandbox.stats() is None:
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
