"""The Python client (clients/python), installed alone in a fresh virtualenv, against the real
daemon (real OPA, real Docker): tools, a read, a sandboxed call with progress, a batch in order,
the Anthropic loop helper, a denied call, an ask approved through the client, a session round
trip, a replayed id that ran once, and an unreachable daemon as a typed error."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import venv
from pathlib import Path
from shlex import quote
from typing import Any

import pytest

from tests.integration.conftest import OWNER_GID, OWNER_UID, containers_of
from tests.integration.harness import (
    PROJECT_ROOT,
    RunningDaemon,
    instance_id_of,
    serve_process,
    text_of,
    wait_serving,
)

pytestmark = [pytest.mark.integration, pytest.mark.docker]

CLIENT = PROJECT_ROOT / "clients" / "python"
TOUR = Path(__file__).with_name("client_scripts") / "python_client_tour.py"


def _client_venv(folder: Path, source: Path, *requirements: str) -> Path:
    """A fresh virtualenv with only what `requirements` pull in (pinned by the adapters' lock)."""
    venv.EnvBuilder(with_pip=True).create(folder)
    python = folder / "bin" / "python"
    subprocess.run(
        [
            *(str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"),
            *("--constraint", str(source / "requirements-adapters.lock"), *requirements),
        ],
        check=True,
        timeout=600,
    )
    return python


@pytest.fixture(scope="module")
def client_source(short_tmp: Path) -> Path:
    """A copy of clients/python: pip builds in its source folder; the checkout stays clean."""
    source = short_tmp / "client-source"
    shutil.copytree(CLIENT, source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    return source


@pytest.fixture(scope="module")
def client_python(short_tmp: Path, client_source: Path) -> Path:
    """A virtualenv with tooljail-client and its two dependencies, nothing of the daemon's."""
    return _client_venv(short_tmp / "client-venv", client_source, str(client_source))


@pytest.fixture(scope="module")
def adapters_python(short_tmp: Path, client_source: Path) -> Path:
    """A virtualenv with tooljail-client and its two adapters' extras, nothing of the daemon's."""
    return _client_venv(
        short_tmp / "adapters-venv", client_source, f"{client_source}[pydantic-ai,openai-agents]"
    )


def _run_script(python: Path, script: Path, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [str(python), str(script), *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/root")},
        cwd="/",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen: dict[str, Any] = json.loads(done.stdout)
    return seen


def test_the_client_alone_drives_a_live_daemon(
    client_python: Path, sandbox_daemon: RunningDaemon, sandbox_dir: Path
) -> None:
    (sandbox_dir / "hello.txt").write_text("hello\n")
    os.chown(sandbox_dir / "hello.txt", OWNER_UID, OWNER_GID)
    seen = _run_script(client_python, TOUR, sandbox_daemon.target, str(sandbox_dir))
    assert not seen["daemon_importable"] and not seen["docker_importable"]
    assert {"Read", "Bash", "Write", "BashOutput"} <= set(seen["tools"])
    assert seen["strict_write"] is True
    assert seen["read"] == [False, "     1\thello", "allow"]
    assert seen["stream_kinds"][-1] == "Answer" and "Progress" in seen["stream_kinds"]
    assert seen["stream_last"] == "step 1\nstep 2\nstep 3\n"
    assert seen["batch_ids"] == ["toolu_b1", "toolu_b2"]
    reply = seen["next_user_message"]
    assert reply["role"] == "user" and reply["content"][0]["tool_use_id"] == "toolu_m1"
    assert reply["content"][0]["content"][0]["text"] == "via loop\n"
    assert seen["denied"] == [True, "deny"]
    assert seen["asked"] == ["ask", True]
    assert seen["approved"] == "allow"
    assert seen["session"] == [True, "default"]
    assert seen["closed"] == "NotFound"
    assert seen["ran_once"] is True
    assert seen["status_version"] is True
    assert seen["unreachable"] in ("Unavailable", "DeadlineExceeded")
    assert seen["async"] == {
        "text": "async\n",
        "last": "Answer",
        "batch": ["toolu_a1"],
        "stream_batch_answers": ["Answer:toolu_s1", "Answer:toolu_s2"],
    }
    assert sys.executable != str(client_python)


ADAPTERS = Path(__file__).with_name("client_scripts") / "adapters_tour.py"


def test_the_adapters_run_their_frameworks_agent_loops_through_the_daemon(
    adapters_python: Path, sandbox_daemon: RunningDaemon, sandbox_dir: Path
) -> None:
    (sandbox_dir / "hello.txt").write_text("hello\n")
    os.chown(sandbox_dir / "hello.txt", OWNER_UID, OWNER_GID)
    # The tour's Bash calls run in the default session, whose directory persists: another
    # test's `cd` may have left it in a git repository (seen with two workers), where the
    # approved `git push` fails otherwise than the tour expects.
    moved = sandbox_daemon.execute("Bash", {"command": f"cd {quote(str(sandbox_dir))}"})
    assert not moved.result.is_error, text_of(moved)
    seen = _run_script(adapters_python, ADAPTERS, sandbox_daemon.target, str(sandbox_dir))
    assert not seen["daemon_importable"] and not seen["docker_importable"]

    pai = seen["pydantic_ai"]
    assert {"Read", "Bash", "Write"} <= set(pai["offered"]) and pai["bash_schema_has_command"]
    # The ask ended the first run as the framework's approval request, with the policy's reasons.
    assert pai["deferred"] and pai["approvals"] == ["toolu_pa4"]
    assert any("force" in reason for reason in pai["ask_reasons"])
    returns = pai["returns"]
    assert returns["toolu_pa1"] == ["success", "from pydantic-ai\n"]
    assert returns["toolu_pa2"] == ["success", "     1\thello"]
    # Denied: the model is asked to try otherwise, with the daemon's reason; nothing ran.
    assert returns["toolu_pa3"][0] == "retried" and "denied by policy" in returns["toolu_pa3"][1]
    # Approved on the second run: the push ran in the sandbox (and failed there: no repository).
    assert (
        returns["toolu_pa4"][0] == "retried" and "not a git repository" in returns["toolu_pa4"][1]
    )
    assert pai["final"] == "done"

    oai = seen["openai_agents"]
    assert oai["offered"] == ["Bash", "Read"]
    outputs = oai["outputs"]
    assert outputs["call_oa1"] == "from openai-agents\n"
    assert outputs["call_oa2"].startswith("Error: The Bash call was denied by policy")
    assert oai["approver"] == [["Bash", "git push --force origin main", True]]
    assert (
        outputs["call_oa3"].startswith("Error: ") and "not a git repository" in outputs["call_oa3"]
    )
    assert oai["final"] == "done"
    answered = sandbox_daemon.audit_lines()
    run = f"_{seen['run']}"
    ran = {line["tool_use_id"].removesuffix(run) for line in answered if line["outcome"] == "allow"}
    assert {"toolu_pa1", "toolu_pa4", "call_oa1", "call_oa3"} <= ran
    assert not {"toolu_pa3", "call_oa2"} & ran


RESTART = Path(__file__).with_name("client_scripts") / "python_client_restart.py"
SERVE = PROJECT_ROOT / "scripts" / "serve-test-daemon.sh"


def _client_step(python: Path, target: str, step: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(python), str(RESTART), target, step],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/root")},
        cwd="/",
    )


def _outcome(process: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err[-3000:]
    result: dict[str, Any] = json.loads(out)
    return result


def test_a_daemon_restart_mid_call_is_a_clear_error_and_the_retry_runs_once(
    client_python: Path, short_tmp: Path
) -> None:
    workspace = short_tmp / "ws-restart"
    workspace.mkdir()
    os.chown(workspace, OWNER_UID, OWNER_GID)
    socket_path, state = short_tmp / "restart.sock", short_tmp / "restart-state"
    target = f"unix://{socket_path}"
    argv = [str(SERVE), str(socket_path), str(workspace), str(state)]
    count = workspace / "count.txt"

    with serve_process(argv, dict(os.environ), socket_path, short_tmp / "restart-1.log") as first:
        wait_serving(target)
        call = _client_step(client_python, target, "first")
        deadline = time.monotonic() + 120
        while not (count.exists() and count.read_text()):
            assert call.poll() is None and time.monotonic() < deadline, call.communicate()
            time.sleep(0.05)
        first.kill()  # the daemon dies mid-call: no drain, no answer
        first.wait()
        cut = _outcome(call)
        time.sleep(5)  # the command would have written "after" by now, had it gone on
    assert cut["error"] == "Unavailable", cut
    assert count.read_text() == "ran\n", "the command outlived the daemon that ran it"

    socket_path.unlink(missing_ok=True)
    with serve_process(argv, dict(os.environ), socket_path, short_tmp / "restart-2.log") as second:
        wait_serving(target)
        retried = _outcome(_client_step(client_python, target, "retry"))
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=60)
    # The restarted daemon ran the cut call once more, then answered the same id from memory.
    assert retried["retry"] == {"is_error": False, "text": "done\n", "replayed": False}
    assert retried["again"] == {"is_error": False, "text": "done\n", "replayed": True}
    assert count.read_text() == "ran\nran\nafter\n"
    assert containers_of(instance_id_of(short_tmp / "restart-2.log")) == []
