"""The Python client (clients/python), installed alone in a fresh virtualenv, against the real
daemon (real OPA, real Docker): tools, a read, a sandboxed call with progress, a batch in order,
the Anthropic loop helper, a denied call, an ask approved through the client, a session round
trip, a replayed id that ran once, and an unreachable daemon as a typed error."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests.integration.conftest import OWNER_GID, OWNER_UID
from tests.integration.harness import PROJECT_ROOT, RunningDaemon

pytestmark = [pytest.mark.integration, pytest.mark.docker]

CLIENT = PROJECT_ROOT / "clients" / "python"
TOUR = Path(__file__).with_name("client_scripts") / "python_client_tour.py"


@pytest.fixture(scope="module")
def client_python(short_tmp: Path) -> Path:
    """A virtualenv with tooljail-client and its two dependencies, nothing of the daemon's."""
    folder = short_tmp / "client-venv"
    venv.EnvBuilder(with_pip=True).create(folder)
    python = folder / "bin" / "python"
    # Built from a copy: pip builds in the source folder, and the checkout must stay clean.
    source = short_tmp / "client-source"
    shutil.copytree(CLIENT, source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(source)],
        check=True,
        timeout=600,
    )
    return python


def test_the_client_alone_drives_a_live_daemon(
    client_python: Path, sandbox_daemon: RunningDaemon, sandbox_dir: Path
) -> None:
    (sandbox_dir / "hello.txt").write_text("hello\n")
    os.chown(sandbox_dir / "hello.txt", OWNER_UID, OWNER_GID)
    done = subprocess.run(
        [str(client_python), str(TOUR), sandbox_daemon.target, str(sandbox_dir)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/root")},
        cwd="/",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout)
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
    assert seen["async"] == {"text": "async\n", "last": "Answer", "batch": ["toolu_a1"]}
    assert sys.executable != str(client_python)
