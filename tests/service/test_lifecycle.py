"""The shipped unit under a real systemd: READY and serving, reload, the watchdog, stop, logs.

Each test runs with what the unit lacks under systemd 252 (hardening.UNIT_FIXES) so it tests its
own subject; test_hardening.py runs the unit exactly as shipped.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.service.harness import DROP_INS, UNIT, Machine, daemon_lines, message, wait_for

pytestmark = [
    pytest.mark.service,
    pytest.mark.integration,
    pytest.mark.docker,
    # The first test of a session also builds the image (when its recipe changed) and installs.
    pytest.mark.timeout(900),
]


def test_start_reports_ready_and_serves_a_read_and_a_sandboxed_command(running: Machine) -> None:
    # Type=notify: `systemctl start` returned, and the unit is running, only because READY=1 came.
    shown = running.show("ActiveState", "SubState", "NRestarts", "StatusText", "Type")
    assert shown["Type"] == "notify"
    assert (shown["ActiveState"], shown["SubState"], shown["NRestarts"]) == (
        "active",
        "running",
        "0",
    )
    assert "listening on unix:///run/tooljail/tooljail.sock" in shown["StatusText"]

    read = running.call("Read", {"file_path": str(running.workspace / "hello.txt")})
    assert (read.outcome, read.is_error) == ("ALLOW", False), read
    assert "     1\thello from the service" in read.text

    bash = running.call("Bash", {"command": "echo hi"})
    assert (bash.outcome, bash.is_error, bash.text) == ("ALLOW", False, "hi\n"), bash
    assert bash.raw["report"].get("sandboxed") is True


def _edit_policy_data(machine: Machine, add_privilege_tool: str) -> None:
    data_path = machine.policies / "data.json"
    data = json.loads(machine.run("cat", str(data_path)).stdout)
    data["tooljail"]["commands"]["privilege_tools"].append(add_privilege_tool)
    machine.write(data_path, json.dumps(data, indent=2) + "\n")


def _denied(machine: Machine, command: str) -> bool:
    return machine.call("Bash", {"command": command}).outcome == "DENY"


def test_reload_puts_a_changed_policy_in_force(running: Machine) -> None:
    assert not _denied(running, "cowsay moo")
    pid = running.main_pid()
    after = running.cursor()
    _edit_policy_data(running, "cowsay")
    running.systemctl("reload", UNIT)
    wait_for("the reloaded policy to deny cowsay", lambda: _denied(running, "cowsay moo"), 60)
    assert "policy reloaded: revision" in running.journal_text(after)
    shown = running.show("ActiveState", "MainPID", "NRestarts")
    assert shown == {"ActiveState": "active", "MainPID": str(pid), "NRestarts": "0"}


def test_reload_names_the_new_git_revision_in_decisions(running: Machine) -> None:
    """An operator keeps the policies in git (root's, as installed). Decisions name its commit."""
    policies = running.policies
    git = f"git -C {policies} -c user.name=op -c user.email=op@example.invalid"
    running.sh(f"{git} init -q && {git} add -A && {git} commit -qm installed")
    _edit_policy_data(running, "cowsay")
    running.sh(f"{git} commit -qam 'cowsay is a privilege tool'")
    commit = running.sh(f"{git} log -1 --format=%h").stdout.strip()
    running.systemctl("reload", UNIT)
    wait_for("the reloaded policy to deny cowsay", lambda: _denied(running, "cowsay moo"), 60)
    answer = running.call("Read", {"file_path": str(running.workspace / "hello.txt")})
    # The daemon asks git as user tooljail; git refuses a repository another user owns unless
    # safe.directory admits it ("detected dubious ownership"), and the revision falls back.
    assert answer.revision == commit, (
        f"decisions name {answer.revision!r}; the policy folder is at commit {commit}. As the "
        f"daemon's user: {running.run('git', '-C', str(policies), 'log', '-1', '--format=%h', user='tooljail', check=False).stderr.strip()[:300]}"  # noqa: E501
    )


def test_reload_refuses_a_broken_policy_and_the_last_good_one_keeps_serving(
    running: Machine,
) -> None:
    _edit_policy_data(running, "cowsay")
    running.systemctl("reload", UNIT)
    wait_for("the reloaded policy to deny cowsay", lambda: _denied(running, "cowsay moo"), 60)

    after = running.cursor()
    running.write(
        running.policies / "tooljail" / "authz" / "broken.rego",
        "package tooljail.authz\nallow if {\n",
    )
    data = json.loads(running.run("cat", str(running.policies / "data.json")).stdout)
    data["tooljail"]["commands"]["privilege_tools"].remove("cowsay")
    running.write(running.policies / "data.json", json.dumps(data) + "\n")
    running.systemctl("reload", UNIT)
    refused = wait_for(
        "the reload to be refused",
        lambda: "policy reload refused" in running.journal_text(after),
        60,
    )
    assert refused
    # Still the last good policy: cowsay stays denied, reads still allowed, the daemon never left.
    assert _denied(running, "cowsay moo")
    read = running.call("Read", {"file_path": str(running.workspace / "hello.txt")})
    assert (read.outcome, read.is_error) == ("ALLOW", False), read
    assert running.show("ActiveState", "NRestarts") == {"ActiveState": "active", "NRestarts": "0"}


def test_watchdog_restarts_a_stopped_daemon_and_its_containers_are_reaped(
    fixed_service: Machine,
) -> None:
    # WatchdogSec=30 as shipped; 5 s here so the test takes seconds, not a minute.
    fixed_service.set_drop_in("70-watchdog", "[Service]\nWatchdogSec=5s\n")
    assert fixed_service.start().returncode == 0
    assert fixed_service.show("WatchdogUSec")["WatchdogUSec"] == "5s"
    in_flight = fixed_service.call_process("Bash", {"command": "sleep 20"}, "toolu_watchdog_long")
    wait_for(
        "the call to be running",
        lambda: any(r["tool_use_id"] == "toolu_watchdog_long" for r in fixed_service.audit()),
        60,
        every_s=0.2,
    )
    time.sleep(1)
    old = fixed_service.containers()
    assert old, "no container ran the call"
    pid = fixed_service.main_pid()
    after = fixed_service.cursor()

    stopped_at = time.time()
    fixed_service.run("kill", "-STOP", str(pid))
    wait_for(
        "systemd to restart the daemon",
        lambda: (
            fixed_service.show("NRestarts", "ActiveState", "SubState")
            == {"NRestarts": "1", "ActiveState": "active", "SubState": "running"}
        ),
        60,
    )
    entries = fixed_service.journal(after)
    fired = [e for e in entries if "Watchdog timeout (limit 5s)" in message(e)]
    assert fired, fixed_service.journal_text(after)[-2000:]
    # The last ping came at most WatchdogSec/2 before the stop: it fires 2.5 to 5 s after it
    # (the rest is slack for a loaded machine).
    fired_after = int(fired[0]["__REALTIME_TIMESTAMP"]) / 1e6 - stopped_at
    assert 2 <= fired_after <= 20, fired_after
    assert fixed_service.main_pid() != pid

    wait_for(
        "the old daemon's containers to be gone",
        lambda: not set(old) & set(fixed_service.containers()),
        60,
    )
    # The call in flight lost its daemon; the client may retry it (same id) on the new one.
    # Either way it ends: nothing waits on the killed daemon.
    in_flight.communicate(timeout=120)
    # The new daemon serves.
    answer = fixed_service.call("Bash", {"command": "echo back"})
    assert (answer.outcome, answer.text) == ("ALLOW", "back\n"), answer


def test_stop_lets_in_flight_sandboxed_calls_finish_and_leaves_no_container(
    running: Machine,
) -> None:
    ids = [f"toolu_stop_{i}" for i in range(4)]
    calls = [
        running.call_process("Bash", {"command": f"sleep 4; echo done {i}"}, tool_use_id)
        for i, tool_use_id in enumerate(ids)
    ]
    # Bash that may change something is audited as "decided" before it runs.
    wait_for(
        "every call to be running",
        lambda: (
            {r["tool_use_id"] for r in running.audit() if r.get("event") == "decided"} >= set(ids)
        ),
        60,
        every_s=0.2,
    )
    after = running.cursor()
    began = time.monotonic()
    running.systemctl("stop", UNIT)
    took = time.monotonic() - began

    answers = []
    for call in calls:
        out, err = call.communicate(timeout=60)
        answers.append((call.returncode, json.loads(out) if out.strip() else err))
    for i, (code, answer) in enumerate(answers):
        assert code == 0, answer
        assert answer["decision"]["outcome"] == "ALLOW", answer
        assert answer["result"]["content"][0]["text"]["text"] == f"done {i}\n", answer
    # Ended by the daemon itself (exit 0), not by SIGKILL at TimeoutStopSec (60 s).
    shown = running.show("ActiveState", "Result", "ExecMainStatus")
    assert shown == {"ActiveState": "inactive", "Result": "success", "ExecMainStatus": "0"}, took
    assert running.containers() == [], running.journal_text(after)[-2000:]
    assert running.run("test", "-e", "/run/tooljail/tooljail.sock", check=False).returncode != 0


def test_stop_leaves_stopping_opa_to_the_daemon(running: Machine) -> None:
    """The daemon stops its OPA itself, after the calls in flight (which may still need
    decisions). systemd must not kill OPA first (KillMode=control-group does, on SIGTERM)."""
    after = running.cursor()
    running.systemctl("stop", UNIT)
    lines = [message(entry) for entry in daemon_lines(running.journal(after))]
    errors = [line for line in lines if '"level":"error"' in line.replace(" ", "")]
    assert not errors, "\n".join(errors)


def test_journal_lines_are_json_once_each_with_call_ids(fixed_service: Machine) -> None:
    fixed_service.set_drop_in("70-debug", "[Service]\nEnvironment=TOOLJAIL_LOGGING__LEVEL=debug\n")
    after = fixed_service.cursor()
    assert fixed_service.start().returncode == 0
    hello = fixed_service.seed_workspace()
    calls = {
        "toolu_journal_read": ("Read", {"file_path": str(hello)}),
        "toolu_journal_denied": ("Read", {"file_path": "/etc/shadow"}),
        "toolu_journal_bash": ("Bash", {"command": "echo journal"}),
    }
    for tool_use_id, (tool, tool_input) in calls.items():
        fixed_service.call(tool, tool_input, tool_use_id=tool_use_id)
    fixed_service.systemctl("stop", UNIT)

    entries = daemon_lines(fixed_service.journal(after))
    assert entries, "the daemon wrote nothing to the journal"
    records = []
    for entry in entries:
        text = message(entry)
        try:
            record = json.loads(text)
        except json.JSONDecodeError:
            pytest.fail(f"not one JSON object per journal line ({entry.get('_COMM')}): {text!r}")
        assert isinstance(record, dict) and {"time", "level", "message"} <= record.keys(), text
        records.append(record)
    # The daemon's own lines (libraries such as the Docker SDK repeat theirs, legitimately).
    seen = [json.dumps(r, sort_keys=True) for r in records if r["logger"].startswith("daemon.")]
    assert len(seen) == len(set(seen)), "a line was written twice"
    for tool_use_id in calls:
        answered = [
            r
            for r in records
            if r.get("tool_use_id") == tool_use_id and r["message"].startswith("answered")
        ]
        assert len(answered) == 1, (tool_use_id, answered)
        assert answered[0].get("decision_id"), answered[0]


def test_a_sandbox_on_the_egress_network_reaches_the_proxy(fixed_service: Machine) -> None:
    """The egress proxy's socket folder is under state_dir and bind-mounted into the container:
    it must be the same path for dockerd, and the hardened daemon must serve it."""
    data_path = fixed_service.policies / "data.json"
    data = json.loads(fixed_service.run("cat", str(data_path)).stdout)
    data["tooljail"]["principals"]["local"] = {"network": "egress"}
    fixed_service.write(data_path, json.dumps(data) + "\n")
    assert fixed_service.start().returncode == 0
    fetch = "import urllib.request as u; u.urlopen('http://example.com/', timeout=10)"
    answer = fixed_service.call("Bash", {"command": f'python3 -c "{fetch}" 2>&1 | tail -n 1'})
    assert answer.outcome == "ALLOW", answer
    # Nothing is allowed out for "local": the proxy answered, and refused.
    assert "HTTP Error 403: Forbidden by tooljail policy" in answer.text, answer
    assert 'example.com:80 refused: No egress rule lets principal "local"' in answer.text, answer


def test_a_failed_start_leaves_nothing_that_blocks_the_next_one(fixed_service: Machine) -> None:
    """A start whose handing over of the new default workspace fails (fchmod refused by a
    drop-in's system call filter); once that is lifted, the next start must serve, not refuse
    what the failed one left."""
    fixed_service.set_drop_in("70-no-fchmod", "[Service]\nSystemCallFilter=~fchmod\n")
    failed = fixed_service.start()
    assert failed.returncode != 0, "the start with fchmod refused should have failed"
    fixed_service.run("rm", str(DROP_INS / "70-no-fchmod.conf"))
    fixed_service.systemctl("daemon-reload")
    fixed_service.systemctl("reset-failed", UNIT, check=False)
    after = fixed_service.cursor()
    started = fixed_service.start()
    assert started.returncode == 0, fixed_service.journal_text(after)[-1500:]


def test_a_refused_start_is_logged_as_json(fixed_service: Machine) -> None:
    """A workspace the sandbox account cannot write is refused at start; the refusal is a log
    line like every other (one JSON object), so the journal stays machine-readable."""
    fixed_service.run(
        "install", "-d", "-o", "root", "-g", "root", "-m", "0755", str(fixed_service.workspace)
    )
    after = fixed_service.cursor()
    assert fixed_service.start().returncode != 0
    lines = [message(entry) for entry in daemon_lines(fixed_service.journal(after))]
    assert lines, "the refusal was not logged"
    not_json = []
    for line in lines:
        try:
            json.loads(line)
        except json.JSONDecodeError:
            not_json.append(line)
    assert not not_json, "\n".join(not_json)
