"""Background commands on the real Docker sandbox, decided by the real OPA: Bash's
run_in_background, BashOutput and KillShell; a foreground command moved to the background at its
timeout; the container of each (hardened and limited as any Bash call's) going with the command,
with KillShell and with its session; and the audit record of each end."""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import grpc
import pytest
from anthropic.types import ToolResultBlockParam
from pydantic import TypeAdapter

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from sandbox.backend import LABEL_INSTANCE, LABEL_SESSION
from tests.integration.conftest import OWNER_GID, OWNER_UID, containers_of
from tests.integration.harness import RunningDaemon, policies_for, running_daemon, text_of

pytestmark = [pytest.mark.integration, pytest.mark.docker]

LOCAL = {"background_shells": 2, "background_timeout_ms": 120_000, "background_on_timeout": True}


@pytest.fixture(scope="module")
def daemon(short_tmp: Path) -> Iterator[RunningDaemon]:
    root = short_tmp / "background"
    root.mkdir()
    policies = policies_for(root, LOCAL)
    workspace = root / "ws"
    workspace.mkdir()
    os.chown(workspace, OWNER_UID, OWNER_GID)
    with running_daemon(
        workspace,
        root / "bg.sock",
        opa={"policies_dir": str(policies)},
        sandbox={"pool_size": 0, "ceilings": {"memory_mb": 256, "pids": 128}},
    ) as running:
        if running.daemon.sandbox is None or running.daemon.sandbox.stats() is None:
            pytest.skip("no Docker engine answers")
        yield running
    assert containers_of(running.daemon.instance_id) == [], "containers left after the stop"


@pytest.fixture
def session(daemon: RunningDaemon) -> Iterator[pb.Session]:
    opened: pb.Session = daemon.stub.OpenSession(pb.OpenSessionRequest(), timeout=60)
    try:
        yield opened
    finally:
        daemon.stub.CloseSession(pb.CloseSessionRequest(session_id=opened.id), timeout=60)


def call(daemon: RunningDaemon, session: pb.Session, name: str, **tool_input: Any) -> str:
    response = daemon.execute(name, tool_input, session_id=session.id)
    assert not response.result.is_error, text_of(response)
    # Every answer is a tool_result block as the Anthropic SDK types it.
    TypeAdapter(ToolResultBlockParam).validate_python(json.loads(response.tool_result_json))
    return text_of(response)


def start(daemon: RunningDaemon, session: pb.Session, command: str) -> str:
    text = call(daemon, session, "Bash", command=command, run_in_background=True)
    found = re.search(r"with ID: (bash_[0-9a-f]{8})", text)
    assert found, text
    return found.group(1)


def read_until(daemon: RunningDaemon, session: pb.Session, shell_id: str, status: str) -> str:
    texts = []
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        texts.append(call(daemon, session, "BashOutput", bash_id=shell_id))
        if f"<status>{status}</status>" in texts[-1]:
            return "\n".join(texts)
        time.sleep(0.2)
    raise AssertionError(f"not {status} in time: {texts[-1]}")


def session_containers(daemon: RunningDaemon, session: pb.Session) -> list[str]:
    """Ids of the daemon's containers (in any state) of the session."""
    labels = [f"{LABEL_INSTANCE}={daemon.daemon.instance_id}", f"{LABEL_SESSION}={session.id}"]
    client = docker.from_env()
    try:
        return [c["Id"] for c in client.api.containers(all=True, filters={"label": labels})]
    finally:
        client.close()


def inspect(container_id: str) -> dict[str, Any]:
    client = docker.from_env()
    try:
        found: dict[str, Any] = client.api.inspect_container(container_id)
        return found
    finally:
        client.close()


def the_running_container(daemon: RunningDaemon, session: pb.Session) -> dict[str, Any]:
    """The one running container of the session, once it is the only one: a container of an
    earlier call may still be listed while the engine removes it, and gone when inspected (a
    flake in CI at 189d58a)."""
    found: list[dict[str, Any]] = []

    def only_one() -> bool:
        found.clear()
        for container_id in session_containers(daemon, session):
            with contextlib.suppress(docker.errors.NotFound):
                details = inspect(container_id)
                if details["State"]["Running"]:
                    found.append(details)
        return len(found) == 1

    assert until(only_one), found
    return found[0]


def until(predicate: Any, timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return bool(predicate())


def test_a_background_command_runs_on_and_its_container_goes_when_it_ends(
    daemon: RunningDaemon, session: pb.Session
) -> None:
    gate = Path(session.workspace) / "gate"
    shell_id = start(
        daemon,
        session,
        f"id -u; ls /sys/class/net; while [ ! -e {gate} ]; do sleep 0.1; done; echo done; exit 4",
    )
    first = read_until(daemon, session, shell_id, "running")
    config = the_running_container(daemon, session)["HostConfig"]
    assert config["Memory"] == 256 << 20  # the policy's 512 MB under the daemon's ceiling
    assert config["PidsLimit"] == 128
    assert config["ReadonlyRootfs"] is True
    assert "ALL" in (config["CapDrop"] or [])
    gate.write_text("")
    text = first + read_until(daemon, session, shell_id, "completed")
    assert "<exit_code>4</exit_code>" in text and "done" in text
    uid = re.search(r"<stdout>\n(\d+)\n", text)
    assert uid and int(uid.group(1)) != 0
    assert re.search(r"\nlo\n", text) and "eth0" not in text  # no network but loopback
    assert until(lambda: session_containers(daemon, session) == [])
    ended = [r for r in daemon.audit_lines("background_ended") if r["shell_id"] == shell_id]
    assert ended and ended[0]["state"] == "completed" and ended[0]["exit_code"] == 4
    assert ended[0]["tool_use_id"].startswith("toolu_") and ended[0]["session"] == session.id


def test_kill_shell_removes_the_container(daemon: RunningDaemon, session: pb.Session) -> None:
    shell_id = start(daemon, session, "echo up; sleep 600")
    read_until(daemon, session, shell_id, "running")
    assert until(lambda: len(session_containers(daemon, session)) == 1)
    killed = call(daemon, session, "KillShell", shell_id=shell_id)
    assert killed.startswith(f"Successfully killed shell: {shell_id}")
    assert until(lambda: session_containers(daemon, session) == [])
    assert "<status>killed</status>" in call(daemon, session, "BashOutput", bash_id=shell_id)


def test_closing_the_session_removes_its_background_containers(daemon: RunningDaemon) -> None:
    opened: pb.Session = daemon.stub.OpenSession(pb.OpenSessionRequest(), timeout=60)
    start(daemon, opened, "sleep 600")
    start(daemon, opened, "sleep 600")
    assert until(lambda: len(session_containers(daemon, opened)) == 2)
    daemon.stub.CloseSession(pb.CloseSessionRequest(session_id=opened.id), timeout=60)
    assert until(lambda: session_containers(daemon, opened) == [])
    ended = [r for r in daemon.audit_lines("background_ended") if r["session"] == opened.id]
    assert sorted(r["killed_by"] for r in ended) == ["session closed", "session closed"]


def test_the_policy_grant_caps_the_session(daemon: RunningDaemon, session: pb.Session) -> None:
    start(daemon, session, "sleep 600")
    start(daemon, session, "sleep 600")
    refused = daemon.execute(
        "Bash", {"command": "sleep 600", "run_in_background": True}, session_id=session.id
    )
    assert refused.result.is_error
    assert "already runs 2 background commands, as many as the policy allows" in text_of(refused)


def test_a_foreground_command_moves_to_the_background_at_its_timeout(
    daemon: RunningDaemon, session: pb.Session
) -> None:
    gate = Path(session.workspace) / "gate"
    command = f"echo begun; while [ ! -e {gate} ]; do sleep 0.1; done; echo finished"
    text = call(daemon, session, "Bash", command=command, timeout=3000)
    assert text.startswith("Command was still running after 3000 ms, so it was moved")
    assert "Output so far:\nbegun" in text
    shell_id = re.search(r"ID: (bash_[0-9a-f]{8})", text)
    assert shell_id
    gate.write_text("")
    later = read_until(daemon, session, shell_id.group(1), "completed")
    assert "finished" in later and "begun" not in later


def test_a_command_that_could_have_moved_but_ended_in_time_answers_with_its_output(
    daemon: RunningDaemon, session: pb.Session
) -> None:
    # 3 s before moving (under the grant's lifetime), counted once the command is in its
    # container: the cold start of this pool-less daemon does not eat into it.
    text = call(daemon, session, "Bash", command="echo one; sleep 0.2; echo two", timeout=3000)
    assert text == "one\ntwo\n"


def test_bash_output_and_kill_shell_are_listed(daemon: RunningDaemon, session: pb.Session) -> None:
    listed = daemon.stub.ListTools(pb.ListToolsRequest(session_id=session.id), timeout=30)
    names = [tool.name for tool in listed.tools]
    assert "BashOutput" in names and "KillShell" in names


def test_a_close_cut_short_by_its_deadline_still_closes_everything(
    daemon: RunningDaemon,
) -> None:
    """Attack: CloseSession with a tiny deadline left half-closed sessions whose background
    commands ran on, uncounted."""
    for deadline in (0.0005, 0.001, 0.002, 0.003, 0.005):
        opened: pb.Session = daemon.stub.OpenSession(pb.OpenSessionRequest(), timeout=60)
        start(daemon, opened, "sleep 600")
        start(daemon, opened, "sleep 600")
        assert until(lambda opened=opened: len(session_containers(daemon, opened)) == 2)
        with contextlib.suppress(grpc.RpcError):  # cut short (or never begun), or done
            daemon.stub.CloseSession(pb.CloseSessionRequest(session_id=opened.id), timeout=deadline)
        try:  # a close that never began is done now; one that began finished on its own
            daemon.stub.CloseSession(pb.CloseSessionRequest(session_id=opened.id), timeout=30)
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.NOT_FOUND, exc
        assert until(lambda opened=opened: session_containers(daemon, opened) == [])
    shells = daemon.daemon.sandbox.shells if daemon.daemon.sandbox else None
    assert shells is not None and shells.running(owner="local") == 0


def test_a_delete_beside_or_in_a_background_command_asks(
    daemon: RunningDaemon, session: pb.Session
) -> None:
    """Attacker round 57: a background shell swapped d for a link to the workspace after a
    foreground `rm -rf d/` was judged (or a background `sleep; rm -rf d/` was judged before a
    later call swapped it), and the workspace was emptied: both were allowed."""
    workspace = Path(session.workspace)
    keep = workspace / "keep.txt"
    keep.write_text("kept\n")
    gate = workspace / "gate"
    shell_id = start(daemon, session, f"mkdir d; while [ ! -e {gate} ]; do sleep 0.1; done")
    beside = daemon.execute("Bash", {"command": "rm -rf d/"}, session_id=session.id)
    assert beside.decision.outcome == pb.ASK, text_of(beside)
    gate.write_text("")
    read_until(daemon, session, shell_id, "completed")
    settled = daemon.execute("Bash", {"command": "rm -rf d/"}, session_id=session.id)
    assert settled.decision.outcome == pb.ALLOW, text_of(settled)
    itself = daemon.execute(
        "Bash", {"command": "sleep 2; rm -rf d/", "run_in_background": True}, session_id=session.id
    )
    assert itself.decision.outcome == pb.ASK, text_of(itself)
    assert keep.read_text() == "kept\n"


def test_closing_a_session_answers_once_its_running_command_has_stopped_writing(
    daemon: RunningDaemon,
) -> None:
    """Attacker round 98: CloseSession answered while the container of the call it cancelled was
    still being removed, and the command's writes went on landing in the workspace after the
    answer (7-10 ms on an idle machine, over a second under load)."""
    import concurrent.futures

    opened: pb.Session = daemon.stub.OpenSession(pb.OpenSessionRequest(), timeout=60)
    ticks = Path(opened.workspace) / "ticks"
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        running = pool.submit(
            daemon.execute,
            "Bash",
            {"command": "while :; do date +%s%N >> ticks; done", "timeout": 600_000},
            session_id=opened.id,
        )
        assert until(lambda: ticks.exists() and ticks.stat().st_size > 1000)
        closed = daemon.stub.CloseSession(pb.CloseSessionRequest(session_id=opened.id), timeout=60)
        at_the_answer = ticks.stat().st_size
        time.sleep(1.0)
        assert ticks.stat().st_size == at_the_answer, "the command wrote after the close answered"
        assert closed.cancelled_calls == 1
        answer = running.result(timeout=60)
    assert answer.result.is_error and "cancelled" in text_of(answer)
    assert session_containers(daemon, opened) == []
