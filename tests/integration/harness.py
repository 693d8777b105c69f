"""Runs a real daemon (real OPA, optionally real Docker) in a background thread for tests."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon._generated.tooljail.v1 import executor_pb2_grpc as pb_grpc
from daemon.app.daemon import Daemon
from daemon.config import PROJECT_ROOT, load_settings

#: The fresh workspaces' filesystem of a test daemon: small (its space is reserved up front).
TEST_WORKSPACES = {"filesystem_mb": 384, "budget_mb": 128}
#: State folders of the daemons the tests started: their workspaces filesystem stays mounted
#: after the daemon stops (as in real use) until the test session unmounts it (tests/conftest.py).
STATE_DIRS: list[Path] = []


class RunningDaemon:
    """A daemon on its own event loop in a thread; call `stop()` when done."""

    def __init__(self, workspace: Path, socket_path: Path, **overrides: Any) -> None:
        self.workspace = workspace
        self.audit_path = socket_path.with_suffix(".audit.jsonl")
        # Tests check behaviour, not speed: a loaded machine must not turn decisions into denies.
        overrides["opa"] = {"timeout_s": 5.0, **overrides.get("opa", {})}
        # Fresh workspaces live on a filesystem of their own: a small one per test daemon.
        overrides["workspaces"] = {**TEST_WORKSPACES, **overrides.get("workspaces", {})}
        # As `make run` does: the Unix socket's principal is named an admin.
        overrides["auth"] = {"admin_principals": ["local"], **overrides.get("auth", {})}
        self.settings = load_settings(
            None,
            listen=f"unix://{socket_path}",
            workspace=workspace,
            audit_log=str(self.audit_path),
            # Unique per test process: concurrent runs on one engine must not reap each other.
            instance_id=f"test-{socket_path.stem}-{os.getpid()}",
            state_dir=socket_path.with_suffix(".state"),
            **overrides,
        )
        STATE_DIRS.append(self.settings.state_dir)
        self.daemon = Daemon(self.settings)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="daemon", daemon=True)
        self._thread.start()
        self._run(self.daemon.start())
        self.target = f"unix:{socket_path}"
        self.channel = grpc.insecure_channel(self.target)
        self.stub = pb_grpc.ExecutorStub(self.channel)

    def _run(self, coro: Any, timeout: float = 60) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout)

    def stop(self) -> None:
        """Stop the daemon and its loop."""
        self.channel.close()
        try:
            self._run(self.daemon.stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            self.loop.close()

    # Helpers the tests use.
    def execute(
        self, name: str, tool_input: dict[str, Any], tool_use_id: str = "", **kw: Any
    ) -> pb.ExecuteResponse:
        """Execute one tool_use (a fresh id unless one is given)."""
        tool_use = pb.ToolUse(id=tool_use_id or f"toolu_{uuid.uuid4().hex[:16]}", name=name)
        tool_use.input.update(tool_input)
        response: pb.ExecuteResponse = self.stub.Execute(
            pb.ExecuteRequest(tool_use=tool_use, **kw), timeout=120
        )
        return response

    def audit_lines(self, event: str | None = "answered") -> list[dict[str, Any]]:
        """The audit records written so far (see `read_audit`)."""
        return read_audit(self.audit_path, event)


def read_audit(path: Path, event: str | None = "answered") -> list[dict[str, Any]]:
    """The audit records in `path`: one "answered" record per call by default, those of another
    event ("decided": calls that may change something, about to run), or all with None."""
    if not path.exists():
        return []
    records = [json.loads(line) for line in path.read_text().splitlines() if line]
    return [r for r in records if event is None or r["event"] == event]


def text_of(response: pb.ExecuteResponse) -> str:
    """All text of a response's tool_result."""
    return "".join(b.text.text for b in response.result.content if b.HasField("text"))


def as_json(response: pb.ExecuteResponse) -> dict[str, Any]:
    """The response as JSON (for debugging output in assertions)."""
    return json_format.MessageToDict(response)


@contextmanager
def running_daemon(workspace: Path, socket_path: Path, **overrides: Any) -> Iterator[RunningDaemon]:
    """A daemon for the duration of a with-block."""
    daemon = RunningDaemon(workspace, socket_path, **overrides)
    try:
        yield daemon
    finally:
        daemon.stop()


@contextmanager
def serve_process(
    argv: list[str], env: dict[str, str], socket_path: Path, log_path: Path, cwd: Path | None = None
) -> Iterator[subprocess.Popen[str]]:
    """`tooljail serve` as a real subprocess, once its socket exists; killed at the end if it
    still runs (its output goes to `log_path`, shown when it fails to start)."""
    with log_path.open("w") as log:
        process = subprocess.Popen(
            argv, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, text=True
        )
    try:
        deadline = time.monotonic() + 60
        while not socket_path.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"tooljail serve did not start:\n{log_path.read_text()}")
            time.sleep(0.05)
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def wait_serving(target: str, timeout_s: float = 60.0) -> None:
    """Until the daemon at `target` says SERVING to a health check (its socket comes first)."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    deadline = time.monotonic() + timeout_s
    with grpc.insecure_channel(target.replace("unix://", "unix:", 1)) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            try:
                reply = health.Check(health_pb2.HealthCheckRequest(), timeout=2)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.1)
    pytest.fail(f"the daemon at {target} never said SERVING")


def instance_id_of(log_path: Path) -> str:
    """The daemon instance a `tooljail serve` log names (its containers carry it as a label)."""
    found = re.search(r"\(instance (\S+)\)", log_path.read_text())
    assert found, log_path.read_text()[-2000:]
    return found.group(1)


def git(repo: Path, *args: str) -> str:
    """Run git in `repo` with a throwaway identity; its stdout."""
    done = subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def committed_repository(workspace: Path, owner: tuple[int, int]) -> None:
    """A repository at `workspace` with one commit (of a.txt), all of it `owner`'s (as a
    workspace is; root's git is told to trust it)."""
    (workspace / "a.txt").write_text("a\n")
    for step in (["init", "-q", "."], ["add", "a.txt"], ["commit", "-qm", "a"]):
        git(workspace, "-c", "safe.directory=*", *step)
    for path in [workspace, *workspace.rglob("*")]:
        os.lchown(path, *owner)


def policies_for(folder: Path, local: dict[str, Any]) -> Path:
    """A copy of the project's policies/ in `folder` whose data.json gives the principal "local"
    (every test daemon's caller) the settings `local`; its path."""
    policies = folder / "policies"
    shutil.copytree(PROJECT_ROOT / "policies", policies)
    data = json.loads((policies / "data.json").read_text())
    data["tooljail"]["principals"]["local"] = local
    (policies / "data.json").write_text(json.dumps(data))
    return policies


def policy_repo(repo: Path) -> Path:
    """A git repository holding a copy of the project's policies/, committed once ("v1")."""
    shutil.copytree(PROJECT_ROOT / "policies", repo / "policies")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "v1")
    return repo
