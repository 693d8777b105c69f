"""The `tooljail` command as a user runs it: serve, tools, call, then SIGTERM."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon.config import PROJECT_ROOT
from tests.integration.harness import serve_process

pytestmark = pytest.mark.integration

TOOLJAIL = [sys.executable, "-m", "daemon.cli"]


@pytest.fixture
def served(short_tmp: Path) -> Iterator[tuple[str, Path, subprocess.Popen[str]]]:
    workspace = short_tmp / "ws-cli"
    workspace.mkdir(exist_ok=True)
    socket_path = short_tmp / "cli.sock"
    env = dict(
        os.environ,
        TOOLJAIL_SANDBOX__ENABLED="false",
        TOOLJAIL_AUDIT_LOG="/dev/null",
        TOOLJAIL_STATE_DIR=str(short_tmp / "cli-state"),
        TOOLJAIL_AUTH__ADMIN_PRINCIPALS='["local"]',
    )
    argv = [*TOOLJAIL, "serve", "--listen", f"unix://{socket_path}", "--workspace", str(workspace)]
    with serve_process(argv, env, socket_path, short_tmp / "cli-serve.log") as process:
        yield f"unix://{socket_path}", workspace, process


def run_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*TOOLJAIL, *args], input=stdin, capture_output=True, text=True, timeout=60, check=False
    )


def test_serve_tools_call_and_sigterm(served: tuple[str, Path, subprocess.Popen[str]]) -> None:
    target, workspace, process = served
    (workspace / "note.txt").write_text("first line\nsecond line\n")

    tools = run_cli("tools", "--target", target)
    assert tools.returncode == 0, tools.stderr
    # Without a sandbox only the host's read-only tools can run, so only they are offered.
    assert {line.split()[0] for line in tools.stdout.splitlines()} == {"Read", "Glob", "Grep", "LS"}
    as_json = run_cli("tools", "--target", target, "--json")
    assert {t["name"] for t in json.loads(as_json.stdout)} == {"Read", "Glob", "Grep", "LS"}

    call = run_cli(
        "call", "--target", target, "Read", json.dumps({"file_path": str(workspace / "note.txt")})
    )
    assert call.returncode == 0, call.stderr
    assert "     1\tfirst line" in call.stdout and "[ALLOW, ok]" in call.stdout

    denied = run_cli("call", "--target", target, "Read", '{"file_path": "/etc/passwd"}')
    assert denied.returncode == 1
    assert "[DENY, error]" in denied.stdout and "outside the workspace" in denied.stdout

    blocks = [
        {"type": "tool_use", "id": "toolu_a", "name": "LS", "input": {"path": str(workspace)}},
        {"type": "tool_use", "id": "toolu_b", "name": "Nope", "input": {}},
    ]
    from_stdin = run_cli("call", "--target", target, "--json", stdin=json.dumps(blocks))
    assert from_stdin.returncode == 1
    assert '"toolUseId": "toolu_a"' in from_stdin.stdout
    assert from_stdin.stdout.index("toolu_a") < from_stdin.stdout.index("toolu_b")

    bad = run_cli("call", "--target", target, "Read", "[1, 2]")
    assert bad.returncode == 2 and "JSON object" in bad.stderr

    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0
    assert not Path(target.removeprefix("unix://")).exists()


def test_serve_logs_each_line_once_as_json_with_the_call_ids(short_tmp: Path) -> None:
    """What a new user sees of `tooljail serve`: one JSON line per event, never the same event
    twice (once as text, once as JSON), no deprecation warnings, and a call's lines carry its
    session, tool_use id and decision id."""
    workspace = short_tmp / "ws-logs"
    workspace.mkdir(exist_ok=True)
    (workspace / "note.txt").write_text("hello\n")
    socket_path = short_tmp / "logs.sock"
    log_path = short_tmp / "logs-serve.log"
    env = dict(
        os.environ,
        TOOLJAIL_SANDBOX__ENABLED="false",
        TOOLJAIL_AUDIT_LOG="/dev/null",
        TOOLJAIL_STATE_DIR=str(short_tmp / "logs-state"),
        TOOLJAIL_LOGGING__LEVEL="debug",
    )
    argv = [*TOOLJAIL, "serve", "--listen", f"unix://{socket_path}", "--workspace", str(workspace)]
    with serve_process(argv, env, socket_path, log_path) as process:
        target = f"unix://{socket_path}"
        note = json.dumps({"file_path": str(workspace / "note.txt")})
        call = run_cli("call", "--target", target, "--json", "--id", "toolu_logged", "Read", note)
        assert call.returncode == 0, call.stderr
        decision_id = json.loads(call.stdout)["decision"]["decisionId"]
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    # Every line is one JSON object: nothing is written a second time as text.
    entries = [json.loads(line) for line in log_path.read_text().splitlines()]
    listening = [e for e in entries if e["message"].startswith("tooljail listening on")]
    assert len(listening) == 1 and listening[0]["level"] == "info"
    assert not [e for e in entries if "deprecat" in e["message"].lower()]
    answered = [e for e in entries if e["message"].startswith("answered Read")]
    assert len(answered) == 1
    assert answered[0]["tool_use_id"] == "toolu_logged"
    assert answered[0]["session"].startswith("default-"), "each principal has its own default"
    assert answered[0]["decision_id"] == decision_id


def test_second_daemon_on_the_same_socket_is_refused(
    served: tuple[str, Path, subprocess.Popen[str]], short_tmp: Path
) -> None:
    target, workspace, _ = served
    env = dict(
        os.environ, TOOLJAIL_SANDBOX__ENABLED="false", TOOLJAIL_STATE_DIR=str(short_tmp / "s2")
    )
    second = subprocess.run(
        [*TOOLJAIL, "serve", "--listen", target, "--workspace", str(workspace)],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert second.returncode == 1
    assert "another tooljail daemon holds" in second.stderr


def test_config_errors_name_the_key(tmp_path: Path) -> None:
    config = tmp_path / "tooljail.toml"
    config.write_text('listen = "nonsense"\n[sandbox]\npool_size = -1\n')
    result = run_cli("serve", "--config", str(config), "--workspace", str(tmp_path))
    assert result.returncode == 2
    assert "listen" in result.stderr and "sandbox.pool_size" in result.stderr


def test_serve_refuses_to_start_with_an_audit_mask_it_cannot_use(short_tmp: Path) -> None:
    policies = short_tmp / "bad-mask-policies"
    shutil.copytree(PROJECT_ROOT / "policies", policies)
    audit_rego = policies / "tooljail" / "authz" / "audit.rego"
    audit_rego.write_text(
        audit_rego.read_text().replace("secret_patterns := {", "secret_patterns := {\n\t`(?P<x`,")
    )
    workspace = short_tmp / "ws-bad-mask"
    workspace.mkdir(exist_ok=True)
    env = dict(
        os.environ,
        TOOLJAIL_SANDBOX__ENABLED="false",
        TOOLJAIL_AUDIT_LOG="/dev/null",
        TOOLJAIL_STATE_DIR=str(short_tmp / "bad-mask-state"),
        TOOLJAIL_OPA__POLICIES_DIR=str(policies),
    )
    socket_path = short_tmp / "bad-mask.sock"
    argv = [*TOOLJAIL, "serve", "--listen", f"unix://{socket_path}", "--workspace", str(workspace)]
    run = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode != 0
    assert "mask_patterns" in run.stderr + run.stdout, run.stderr[-2000:]
    assert not socket_path.exists(), "nothing may be served without a usable mask"


def test_a_refused_start_is_one_json_line_when_the_logs_are_json(short_tmp: Path) -> None:
    not_a_folder = short_tmp / "not-a-folder"
    not_a_folder.write_text("")
    env = dict(
        os.environ,
        TOOLJAIL_SANDBOX__ENABLED="false",
        TOOLJAIL_AUDIT_LOG="/dev/null",
        TOOLJAIL_STATE_DIR=str(short_tmp / "refused-state"),
        TOOLJAIL_LOGGING__FORMAT="json",
    )
    socket_path = short_tmp / "refused.sock"
    argv = [*TOOLJAIL, "serve", "--listen", f"unix://{socket_path}"]
    argv += ["--workspace", str(not_a_folder)]
    run = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 1
    lines = [json.loads(line) for line in run.stderr.splitlines() if line.strip()]
    refused = [line for line in lines if "cannot start" in line["message"]]
    assert len(refused) == 1 and refused[0]["level"] == "critical", run.stderr[-2000:]
    assert "not a directory" in refused[0]["message"]
