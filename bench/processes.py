"""The processes under test, started as a user would start them: an OPA server with the
project's policies, and `tooljail serve` pointed at it; plus readers of their /proc counters."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon._generated.tooljail.v1 import executor_pb2_grpc as pb_grpc

ROOT = Path(__file__).resolve().parent.parent
OPA_BINARY = ROOT / ".tools" / "bin" / "opa"
TOOLJAIL = Path(sys.executable).parent / "tooljail"
_CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def policy_files(policies: Path) -> list[Path]:
    """What the daemon loads into its managed OPA: every non-test .rego and data.json (the input
    schema beside them is documentation, not data)."""
    rego = [p for p in sorted(policies.rglob("*.rego")) if not p.name.endswith("_test.rego")]
    data = policies / "data.json"
    return [*rego, *([data] if data.is_file() else [])]


def _stop(process: subprocess.Popen[bytes], grace_s: float) -> int:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode


def _tail(path: Path, limit: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-limit:]
    except OSError:
        return ""


def unmount_below(folder: Path) -> None:
    """Unmount whatever is mounted below `folder` (a daemon leaves its workspaces filesystem
    mounted when it stops, as in real use), so the folder can be removed."""
    resolved = str(folder.resolve())
    with Path("/proc/self/mountinfo").open(encoding="utf-8") as mounts:
        points = [line.split()[4] for line in mounts]
    for point in sorted((p for p in points if p.startswith(resolved + "/")), reverse=True):
        subprocess.run(["umount", "--lazy", point], check=False, capture_output=True)


#: The `limit` of the one Read whose decision the benchmark's OPA logs (parts.probe_read_input).
PROBE_READ_LIMIT = 4321
#: The Bash command whose decisions it logs too (parts.probe_bash_input): shaped as the warm
#: calls' `echo hi`, so the policy judges it the same way.
PROBE_BASH_COMMAND = "echo probe"
#: Every other decision is dropped before it is written: the managed OPA logs none at all.
_PROBE_ONLY_LOG = f"""package tooljail_bench.decision_log

default drop := true

drop := false if input.input.input.limit == {PROBE_READ_LIMIT}

drop := false if input.input.input.command == "{PROBE_BASH_COMMAND}"
"""


class OpaServer:
    """`opa run --server` on a free loopback port, with the flags the managed OPA gets, its log in
    a file. It also logs the probe Read's and Bash's decisions, and only those (the rest are dropped
    before they are written): the exact input the daemon sends, for the baseline query."""

    def __init__(self, work: Path, policies: Path = ROOT / "policies") -> None:
        if not os.access(OPA_BINARY, os.X_OK):
            raise RuntimeError(f"{OPA_BINARY} is missing: run `make opa` first")
        self.port = free_port()
        self.log_path = work / "opa.log"
        self._log: IO[bytes] = self.log_path.open("wb")
        probe_only = work / "probe_only_log.rego"
        probe_only.write_text(_PROBE_ONLY_LOG)
        self.process = subprocess.Popen(
            [
                str(OPA_BINARY),
                "run",
                "--server",
                "--addr",
                f"127.0.0.1:{self.port}",
                "--log-level",
                "error",
                "--disable-telemetry",
                "--set",
                "decision_logs.console=true",
                "--set",
                "decision_logs.drop_decision=/tooljail_bench/decision_log/drop",
                *map(str, policy_files(policies)),
                str(probe_only),
            ],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
        )
        self._wait_ready()

    @property
    def url(self) -> str:
        """Base URL, as TOOLJAIL_OPA__URL takes it."""
        return f"http://127.0.0.1:{self.port}"

    def _wait_ready(self, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"opa exited at start: {_tail(self.log_path)}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port)):
                return
            time.sleep(0.05)
        raise RuntimeError(f"opa did not listen within {timeout_s:.0f} s")

    def decision_input(self, tool: str) -> dict[str, Any]:
        """The input document of the last decision logged for `tool`: exactly what the daemon sent,
        so the baseline query asks OPA the same question."""
        self._log.flush()
        found: dict[str, Any] | None = None
        with self.log_path.open("rb") as log:
            for raw in log:
                if b'"Decision Log"' not in raw:
                    continue
                entry = json.loads(raw)
                document = entry.get("input")
                if (
                    entry.get("path", "").endswith("/decision")
                    and isinstance(document, dict)
                    and document.get("tool", {}).get("name") == tool
                ):
                    found = document
        if found is None:
            raise RuntimeError(f"OPA logged no decision for {tool}; was the probe's limit sent?")
        return found

    def stop(self) -> None:
        """Stop the server."""
        _stop(self.process, 5)
        self._log.close()


@dataclass(frozen=True)
class DaemonConfig:
    """How one daemon under test is started."""

    name: str
    """Short name (socket, state and log file names)."""
    workspace: Path
    opa_url: str
    instance_id: str
    env: dict[str, str]
    """Extra TOOLJAIL_* settings (pool size, OPA timeout)."""


class DaemonProcess:
    """`tooljail serve` in its own process, as a user runs it."""

    def __init__(self, work: Path, config: DaemonConfig) -> None:
        self.config = config
        self.socket_path = work / f"{config.name}.sock"
        self.target = f"unix:{self.socket_path}"
        self.log_path = work / f"{config.name}.log"
        self.audit_path = work / f"{config.name}.audit.jsonl"
        # The phase metrics (tooljail_call_phase_seconds) give the breakdown of a call.
        self.metrics_url = f"http://127.0.0.1:{free_port()}/metrics"
        empty_config = work / "empty.toml"  # a system-wide /etc/tooljail file must not leak in
        empty_config.touch()
        env = {
            **os.environ,
            "TOOLJAIL_STATE_DIR": str(work / f"{config.name}.state"),
            "TOOLJAIL_AUDIT_LOG": str(self.audit_path),
            "TOOLJAIL_LOGGING__LEVEL": "warning",
            "TOOLJAIL_OPA__URL": config.opa_url,
            "TOOLJAIL_INSTANCE_ID": config.instance_id,
            # Admin.Status tells when the warm pool is full.
            "TOOLJAIL_AUTH__ADMIN_PRINCIPALS": '["local"]',
            "TOOLJAIL_WORKSPACES__FILESYSTEM_MB": "384",
            "TOOLJAIL_METRICS__ENABLED": "true",
            "TOOLJAIL_METRICS__LISTEN": self.metrics_url.removeprefix("http://").split("/")[0],
            **config.env,
        }
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [
                    str(TOOLJAIL),
                    "serve",
                    "--config",
                    str(empty_config),
                    "--listen",
                    f"unix://{self.socket_path}",
                    "--workspace",
                    str(config.workspace),
                ],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
        self.pid = self.process.pid

    def wait_serving(self, timeout_s: float = 60.0) -> None:
        """Until the health service answers SERVING."""
        deadline = time.monotonic() + timeout_s
        with grpc.insecure_channel(self.target) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise RuntimeError(f"tooljail serve exited: {_tail(self.log_path)}")
                with contextlib.suppress(grpc.RpcError):
                    reply = stub.Check(health_pb2.HealthCheckRequest(), timeout=2)
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        return
                time.sleep(0.1)
        raise RuntimeError(f"tooljail serve did not become healthy: {_tail(self.log_path)}")

    def status(self) -> pb.StatusResponse:
        """Admin.Status (warm containers, health of OPA and Docker)."""
        with grpc.insecure_channel(self.target) as channel:
            reply: pb.StatusResponse = pb_grpc.AdminStub(channel).Status(
                pb.StatusRequest(), timeout=10
            )
            return reply

    def wait_pool(self, size: int, timeout_s: float = 60.0) -> bool:
        """Until `size` warm containers are ready; False on timeout."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.status().pool_ready >= size:
                return True
            time.sleep(0.2)
        return False

    def stop(self, grace_s: float = 30.0) -> int:
        """SIGTERM (the daemon drains and removes its containers), SIGKILL after the grace."""
        return _stop(self.process, grace_s)

    def log_tail(self) -> str:
        """The end of the daemon's log (for failure messages)."""
        return _tail(self.log_path)


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(own user+sys, reaped children's user+sys) CPU seconds of a process, from /proc."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2 :].split()  # the name may hold spaces and parentheses
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return (utime + stime) / _CLK_TCK, (cutime + cstime) / _CLK_TCK


def machine_busy_s() -> float:
    """CPU seconds every CPU of the machine spent on anything but idling and waiting for I/O
    since it booted, from /proc/stat: whoever spent them (the engine, containers, the daemon)."""
    with Path("/proc/stat").open() as stat:
        fields = [int(x) for x in stat.readline().split()[1:]]
    idle, iowait = fields[3], fields[4]
    # guest and guest_nice (fields 9 and 10) are counted in user and nice already.
    return (sum(fields[:8]) - idle - iowait) / _CLK_TCK


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) of a process in KiB, from /proc."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split()[0])
    return found


def machine_load() -> dict[str, float]:
    """The machine's 1-minute load average and CPU tick counters (all CPUs), from /proc."""
    first = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    ticks = [int(x) for x in first]
    idle = ticks[3] + ticks[4]  # idle + iowait
    return {
        "loadavg_1m": float(Path("/proc/loadavg").read_text().split()[0]),
        "busy_ticks": float(sum(ticks) - idle),
        "total_ticks": float(sum(ticks)),
    }


def machine_load_since(before: dict[str, float]) -> dict[str, float]:
    """Load averages at both ends and the share of all CPUs busy in between (any process: the
    benchmark's own and whatever else runs on the machine)."""
    after = machine_load()
    total = after["total_ticks"] - before["total_ticks"]
    busy = after["busy_ticks"] - before["busy_ticks"]
    return {
        "loadavg_1m_start": before["loadavg_1m"],
        "loadavg_1m_end": after["loadavg_1m"],
        "cpu_busy": busy / total if total > 0 else 0.0,
    }
