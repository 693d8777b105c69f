"""One benchmark run: its work folder, the processes under test, the client processes that
load them, and the record of each part (what it measured, or why it failed)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import processes
from bench.plans import Plan
from bench.processes import DaemonConfig, DaemonProcess, OpaServer
from sandbox.reaper import list_instance_containers, remove_all


def log(message: str) -> None:
    """Progress on stderr (stdout stays free for the summary)."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def run_client(spec: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """One scenario in a client process of its own; its JSON answer."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.client"],
        input=json.dumps(spec).encode(),
        capture_output=True,
        cwd=processes.ROOT,
        timeout=timeout_s,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"client exited with {done.returncode}: {done.stderr.decode()[-3000:]}")
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


class Docker:
    """The engine as seen from the benchmark: which image, and the containers of an instance."""

    def __init__(self) -> None:
        import docker

        from sandbox.image import LATEST_REF, default_image_ref

        self.client = docker.from_env(version="auto")
        self.client.ping()
        self.version = str(self.client.version().get("Version", "?"))
        self.image = ""
        for ref in (default_image_ref(), LATEST_REF):
            if self.client.images.list(name=ref):
                self.image = ref
                break
        if not self.image:
            raise RuntimeError("the sandbox image is not built: run `make image`")

    def containers(self, instance_id: str) -> list[str]:
        """Ids of every container of a daemon instance, in any state (one list call: the
        high-level SDK inspects each container and fails on one removed meanwhile)."""
        return [cid for cid, _ in list_instance_containers(self.client.api, instance_id)]

    def wait_at_most(self, instance_id: str, keep: int, timeout_s: float) -> int:
        """Wait until at most `keep` containers of the instance remain; how many remain."""
        deadline = time.monotonic() + timeout_s
        count = len(self.containers(instance_id))
        while count > keep and time.monotonic() < deadline:
            time.sleep(0.25)
            count = len(self.containers(instance_id))
        return count

    def remove_all(self, instance_id: str) -> int:
        """Remove what a daemon left behind (counted as leaked before this); how many."""
        leftovers = self.containers(instance_id)
        remove_all(self.client.api, leftovers)
        return len(leftovers)


@dataclasses.dataclass
class Run:
    """One benchmark run: its plan, work folder, processes and what it measured."""

    plan: Plan
    work: Path
    docker: Docker | None
    docker_problem: str = ""
    parts: dict[str, Any] = dataclasses.field(default_factory=dict)
    failures: list[dict[str, str]] = dataclasses.field(default_factory=list)
    errors: int = 0
    workspace: Path = Path()
    tree: Path = Path()
    opa: OpaServer | None = None
    daemon: DaemonProcess | None = None
    profile_dir: Path | None = None
    only: frozenset[str] = frozenset()
    """Parts to run (all when empty): for working on one part at a time."""

    def part(self, name: str, measure: Callable[[], dict[str, Any]]) -> None:
        """Run one part; a crash is recorded and the run goes on."""
        if self.only and name not in self.only:
            return
        log(f"{name} ...")
        started = time.monotonic()
        load_before = processes.machine_load()
        try:
            result = measure()
            result["machine_load"] = processes.machine_load_since(load_before)
        except Exception as exc:  # noqa: BLE001 - one broken part must not hide the others
            self.failures.append({"part": name, "error": f"{type(exc).__name__}: {exc}"[:2000]})
            log(f"{name} FAILED: {exc}")
            return
        self.errors += int(result.get("errors", 0))
        self.parts[name] = result
        log(f"{name} done in {time.monotonic() - started:.1f} s ({result.get('errors', 0)} errors)")
        for sample in result.get("error_samples", []):
            log(f"  error: {sample}")

    def skip(self, name: str, reason: str) -> None:
        """A part that could not run here."""
        self.failures.append({"part": name, "error": f"skipped: {reason}"})
        log(f"{name} skipped: {reason}")

    def start_daemon(self, name: str, pool_size: int) -> DaemonProcess:
        """`tooljail serve` with this run's OPA, ready to serve (and its pool warm)."""
        assert self.opa is not None
        env = {
            "TOOLJAIL_SANDBOX__POOL_SIZE": str(pool_size),
            "TOOLJAIL_OPA__TIMEOUT_S": str(self.plan.opa_timeout_s),
        }
        if self.docker is None:
            env["TOOLJAIL_SANDBOX__ENABLED"] = "false"
        config = DaemonConfig(
            name=name,
            workspace=self.workspace,
            opa_url=self.opa.url,
            instance_id=f"bench-{uuid.uuid4().hex[:8]}-{name}",
            env=env,
        )
        daemon = DaemonProcess(self.work, config)
        daemon.wait_serving()
        if self.docker is not None and pool_size and not daemon.wait_pool(pool_size):
            log(f"warning: the {name} daemon's pool did not fill within 60 s")
        return daemon

    def spec(self, scenario: str, daemon: DaemonProcess, **fields: Any) -> dict[str, Any]:
        """A client scenario against a daemon."""
        return {
            "scenario": scenario,
            "target": daemon.target,
            "daemon_pid": daemon.pid,
            "metrics_url": daemon.metrics_url,
            "opa_pid": self.opa.process.pid if self.opa else 0,
            "timeout_s": self.plan.call_timeout_s,
            **fields,
        }
