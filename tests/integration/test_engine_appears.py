"""A daemon started while no Docker engine answers: its sandboxed tools are not offered and
refuse to run; once the engine answers, they are offered and run, without a restart."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon.app import sandbox as app_sandbox
from tests.integration.conftest import OWNER_GID, OWNER_UID
from tests.integration.harness import RunningDaemon, running_daemon, text_of

pytestmark = [pytest.mark.integration, pytest.mark.docker]

ENGINE_SOCKET = Path("/var/run/docker.sock")


@pytest.fixture
def late_engine(
    short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[RunningDaemon, Path]]:
    if not ENGINE_SOCKET.exists():
        pytest.skip("the Docker engine's socket is not where this test makes it appear")
    root = short_tmp / "late-engine"
    root.mkdir()
    workspace = root / "ws"
    workspace.mkdir()
    os.chown(workspace, OWNER_UID, OWNER_GID)
    socket = root / "engine.sock"  # nothing there yet: no engine answers
    monkeypatch.setenv("DOCKER_HOST", f"unix://{socket}")
    monkeypatch.setattr(app_sandbox, "ENGINE_RETRY_S", 0.5)
    with running_daemon(workspace, root / "late.sock", sandbox={"pool_size": 0}) as daemon:
        yield daemon, socket


def names(daemon: RunningDaemon) -> set[str]:
    return {t.name for t in daemon.stub.ListTools(pb.ListToolsRequest(), timeout=30).tools}


def test_sandboxed_tools_come_back_when_the_engine_answers(
    late_engine: tuple[RunningDaemon, Path],
) -> None:
    daemon, socket = late_engine
    assert "Bash" not in names(daemon) and "Read" in names(daemon)
    refused = daemon.execute("Bash", {"command": "echo hi"})
    assert refused.result.is_error and "sandbox is not available" in text_of(refused)
    socket.symlink_to(ENGINE_SOCKET)  # the engine appears
    deadline = time.monotonic() + 30
    while "Bash" not in names(daemon) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert {"Bash", "Write", "BashOutput"} <= names(daemon)
    ran = daemon.execute("Bash", {"command": "echo back"})
    assert not ran.result.is_error and text_of(ran) == "back\n", text_of(ran)
