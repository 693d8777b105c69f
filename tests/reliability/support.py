"""Shared pieces of the reliability suite: scale, waiting, calls, and a daemon in a subprocess.

The subprocess daemon is what a real deployment runs (`tooljail serve`), so it can be killed with
SIGKILL, restarted on the same socket, and measured (RSS) on its own, without the test's threads
sharing its interpreter.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
import docker.errors
import grpc

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon._generated.tooljail.v1 import executor_pb2_grpc as pb_grpc
from daemon.config import PROJECT_ROOT
from sandbox.backend import LABEL_INSTANCE, LABEL_MANAGED
from sandbox.image import default_image_ref
from tests.integration.harness import STATE_DIRS, RunningDaemon, read_audit

#: `TOOLJAIL_CHAOS=1` (scripts/chaos.sh) switches every scenario to its long variant.
CHAOS = os.environ.get("TOOLJAIL_CHAOS") == "1"

#: Owner of the workspaces the sandbox writes to: not root, so the uid mapping is exercised.
OWNER_UID = 1000
OWNER_GID = 1000


def owned_workspace(path: Path) -> Path:
    """A new workspace folder (parents too) owned by the non-root workspace owner."""
    path.mkdir(parents=True)
    os.chown(path, OWNER_UID, OWNER_GID)
    return path


def scaled(default: int, chaos: int) -> int:
    """A case count: the default suite's, or the long variant's under TOOLJAIL_CHAOS=1."""
    return chaos if CHAOS else default


def unique(prefix: str) -> str:
    """A name no other run on this machine uses (instance ids are shared through Docker)."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def wait_for(predicate: Callable[[], bool], timeout_s: float = 30.0, step_s: float = 0.05) -> bool:
    """Poll until the predicate holds; False when it still does not after the timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(step_s)


def text_of(response: pb.ExecuteResponse) -> str:
    """All text of a response's tool_result."""
    return "".join(b.text.text for b in response.result.content if b.HasField("text"))


def tool_use(name: str, tool_input: dict[str, Any], tool_use_id: str = "") -> pb.ToolUse:
    """A ToolUse message (a fresh id unless one is given)."""
    use = pb.ToolUse(id=tool_use_id or f"toolu_{uuid.uuid4().hex[:16]}", name=name)
    use.input.update(tool_input)
    return use


def execute(
    stub: pb_grpc.ExecutorStub,
    name: str,
    tool_input: dict[str, Any],
    tool_use_id: str = "",
    *,
    session_id: str = "",
    timeout: float = 120,
) -> pb.ExecuteResponse:
    """One Execute call."""
    request = pb.ExecuteRequest(
        tool_use=tool_use(name, tool_input, tool_use_id), session_id=session_id
    )
    response: pb.ExecuteResponse = stub.Execute(request, timeout=timeout)
    return response


# --- isolation scenarios -----------------------------------------------------------------------


def policy_with(folder: Path, **principal_settings: Any) -> Path:
    """A copy of the shipped policies (in folder/policies) whose data allows sessions over
    directories below folder/roots, and gives the local principal `principal_settings`."""
    policies = folder / "policies"
    shutil.copytree(PROJECT_ROOT / "policies", policies)
    data_path = policies / "data.json"
    data = json.loads(data_path.read_text())
    data["tooljail"]["workspace_roots"] = [str(folder / "roots")]
    data["tooljail"]["principals"]["local"] = principal_settings
    data_path.write_text(json.dumps(data))
    (folder / "roots").mkdir()
    return policies


def open_session(daemon: RunningDaemon, workspace: str = "") -> pb.Session:
    session: pb.Session = daemon.stub.OpenSession(
        pb.OpenSessionRequest(workspace=workspace), timeout=60
    )
    return session


def bash(daemon: RunningDaemon, command: str, session: str = "") -> pb.ExecuteResponse:
    return execute(daemon.stub, "Bash", {"command": command}, session_id=session)


# --- Docker ------------------------------------------------------------------------------------


def docker_problem() -> str:
    """Why sandbox scenarios cannot run here, or "" when the engine and the image are ready."""
    try:
        client = docker.from_env(version="auto")
    except docker.errors.DockerException as exc:
        return f"no Docker engine answers ({exc}); start one with `make docker`"
    try:
        client.ping()
        ref = os.environ.get("TOOLJAIL_SANDBOX_IMAGE") or default_image_ref()
        client.images.get(ref)
    except docker.errors.ImageNotFound:
        return f"the sandbox image {ref} is not built; run `make image`"
    except docker.errors.DockerException as exc:
        return f"the Docker engine does not answer ({exc})"
    finally:
        client.close()
    return ""


def container_ids(instance_id: str) -> set[str]:
    """Ids of every container of a daemon instance, in any state."""
    client = docker.from_env(version="auto")
    try:
        filters = {"label": [f"{LABEL_MANAGED}=true", f"{LABEL_INSTANCE}={instance_id}"]}
        return {str(c["Id"]) for c in client.api.containers(all=True, filters=filters)}
    finally:
        client.close()


def settle_containers(instance_id: str, keep: int, timeout_s: float = 30.0) -> int:
    """Wait until at most `keep` containers (the warm pool) remain; returns the count then."""
    count = len(container_ids(instance_id))
    deadline = time.monotonic() + timeout_s
    while count > keep and time.monotonic() < deadline:
        time.sleep(0.2)
        count = len(container_ids(instance_id))
    return count


# --- processes ---------------------------------------------------------------------------------


def rss_bytes(pid: int) -> int:
    """Resident set size of a process, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise LookupError(f"no VmRSS for pid {pid}")


def children_named(pid: int, name: str) -> list[int]:
    """Direct children of `pid` whose command name is `name`."""
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(
                line.split(":\t", 1) for line in status.read_text().splitlines() if ":\t" in line
            )
        except OSError:
            continue  # the process ended while we looked
        if fields.get("PPid", "").strip() == str(pid) and fields.get("Name", "").strip() == name:
            found.append(int(status.parent.name))
    return found


def alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


class DaemonProcess:
    """`tooljail serve` in a subprocess, configured through the environment.

    Args:
        folder: Where its socket, state, audit log and output log go (short: socket paths are
            limited to about 100 bytes).
        workspace: The default session's workspace.
        instance_id: Labels its containers; fixed so a restart reaps what a killed one left.
        env: Extra TOOLJAIL_* settings.
    """

    def __init__(
        self, folder: Path, workspace: Path, instance_id: str, env: dict[str, str] | None = None
    ) -> None:
        self.folder = folder
        self.workspace = workspace
        self.instance_id = instance_id
        self.socket_path = folder / "d.sock"
        self.audit_path = folder / "audit.jsonl"
        self.log_path = folder / "daemon.log"
        STATE_DIRS.append(folder / "state")
        self.env = dict(
            os.environ,
            TOOLJAIL_INSTANCE_ID=instance_id,
            TOOLJAIL_STATE_DIR=str(folder / "state"),
            TOOLJAIL_AUTH__ADMIN_PRINCIPALS='["local"]',
            TOOLJAIL_AUDIT_LOG=str(self.audit_path),
            # Behaviour under test, not speed: a loaded machine must not turn allows into denies.
            TOOLJAIL_OPA__TIMEOUT_S="5",
            TOOLJAIL_WORKSPACES__FILESYSTEM_MB="384",
            TOOLJAIL_WORKSPACES__BUDGET_MB="128",
            **(env or {}),
        )
        self.process: subprocess.Popen[bytes] | None = None
        self.channel: grpc.Channel | None = None
        self.stub: pb_grpc.ExecutorStub | None = None

    @property
    def target(self) -> str:
        """The gRPC target of its socket."""
        return f"unix:{self.socket_path}"

    @property
    def pid(self) -> int:
        """Process id of the daemon."""
        assert self.process is not None
        return self.process.pid

    def start(self, timeout_s: float = 60.0) -> None:
        """Start it and wait until it answers a health check."""
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "daemon.cli", "serve", "--listen",
                 f"unix://{self.socket_path}", "--workspace", str(self.workspace)],
                env=self.env, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        self.channel = grpc.insecure_channel(
            self.target, options=[("grpc.max_receive_message_length", 64 << 20)]
        )
        self.stub = pb_grpc.ExecutorStub(self.channel)
        admin = pb_grpc.AdminStub(self.channel)
        deadline = time.monotonic() + timeout_s
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"the daemon exited at start:\n{self.log_text()}")
            try:
                admin.Status(pb.StatusRequest(), timeout=2)
                return
            except grpc.RpcError:
                if time.monotonic() >= deadline:
                    raise RuntimeError(
                        f"the daemon did not answer within {timeout_s} s:\n{self.log_text()}"
                    ) from None
                time.sleep(0.1)

    def status(self) -> pb.StatusResponse:
        """Admin.Status."""
        assert self.channel is not None
        response: pb.StatusResponse = pb_grpc.AdminStub(self.channel).Status(
            pb.StatusRequest(), timeout=30
        )
        return response

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs."""
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=30)
        self._close_channel()

    def stop(self, timeout_s: float = 90.0) -> int:
        """SIGTERM and wait; returns the exit code (killed if it does not exit in time)."""
        if self.process is None:
            return 0
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._close_channel()
        return self.process.returncode

    def _close_channel(self) -> None:
        if self.channel is not None:
            self.channel.close()
            self.channel = None

    def log_text(self) -> str:
        """The daemon's output so far (its last 4,000 characters)."""
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""

    def audit_lines(self, event: str | None = "answered") -> list[dict[str, Any]]:
        """The audit records written so far (see `read_audit`)."""
        return read_audit(self.audit_path, event)
