"""tooljail's benchmark: starts an OPA server and `tooljail serve` as a user would, drives them from
a separate client process (bench.client), measures the baselines in the same run, and writes
latest.json, latest.md and PNG plots (bench.report).

    .venv/bin/python -m bench.bench            # full run (about 5 minutes), into bench/results/
    .venv/bin/python -m bench.bench --smoke    # every part for about a second, into a temp dir

It is not a test: goals that do not hold are reported, never a failure. The exit code is non-zero
only when a part crashed or, in smoke mode, when a call answered with an error.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from bench import processes, report, workload
from bench.plans import FULL, SMOKE, Plan
from bench.processes import DaemonConfig, DaemonProcess, OpaServer
from bench.stats import per_second, summarize
from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon._generated.tooljail.v1 import executor_pb2_grpc as pb_grpc

RESULTS_DIR = processes.ROOT / "bench" / "results"
LABEL_INSTANCE = "io.tooljail.instance"


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

    def containers(self, instance_id: str) -> list[Any]:
        """Every container of a daemon instance, in any state."""
        found: list[Any] = self.client.containers.list(
            all=True, filters={"label": f"{LABEL_INSTANCE}={instance_id}"}
        )
        return found

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
        for container in leftovers:
            container.remove(force=True)
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

    def part(self, name: str, measure: Callable[[], dict[str, Any]]) -> None:
        """Run one part; a crash is recorded and the run goes on."""
        log(f"{name} ...")
        started = time.monotonic()
        try:
            result = measure()
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
            "timeout_s": self.plan.call_timeout_s,
            **fields,
        }


def probe_read_input(run: Run, daemon: DaemonProcess) -> dict[str, Any]:
    """One Execute(Read) so that OPA logs the exact decision input the daemon sends for it."""
    assert run.opa is not None
    with grpc.insecure_channel(daemon.target) as channel:
        request = pb.ExecuteRequest()
        request.tool_use.id = "toolu_bench_probe"
        request.tool_use.name = "Read"
        request.tool_use.input.update(workload.read_input(run.workspace / workload.ONE_KB_FILE))
        response = pb_grpc.ExecutorStub(channel).Execute(request, timeout=30)
    if response.decision.outcome != pb.ALLOW or response.result.is_error:
        text = "".join(b.text.text for b in response.result.content)
        raise RuntimeError(f"the probe Read did not succeed: {text[:500]}")
    return run.opa.decision_input("Read")


def measure_decision(run: Run, daemon: DaemonProcess) -> dict[str, Any]:
    """Decision overhead: Execute(Read 1 KB) against health Check + OPA decision query."""
    plan = run.plan
    assert run.opa is not None
    raw = run_client(
        run.spec(
            "decision",
            daemon,
            n=plan.decision_n,
            warmup=plan.decision_warmup,
            read_path=str(run.workspace / workload.ONE_KB_FILE),
            opa_url=run.opa.url,
            opa_timeout_s=plan.opa_timeout_s,
            opa_input=probe_read_input(run, daemon),
        ),
        timeout_s=600,
    )
    return {
        **{key: summarize(raw[key]) for key in ("execute_read", "health", "opa")},
        "daemon_cpu_s": raw["daemon_cpu_s"],
        "calls": raw["daemon_calls"],
        "errors": raw["errors"],
        "error_samples": raw["error_samples"],
    }


def measure_load(
    run: Run, daemon: DaemonProcess, kind: str, clients: int, seconds: float, warmup_s: float
) -> dict[str, Any]:
    """Concurrent clients back to back: calls/s, latencies, per-second series, daemon CPU."""
    raw = run_client(
        run.spec("load", daemon, kind=kind, clients=clients, duration_s=seconds, warmup_s=warmup_s),
        timeout_s=seconds + warmup_s + 300,
    )
    latencies: dict[str, list[float]] = raw["latencies"]
    every = [x for samples in latencies.values() for x in samples]
    calls = len(every)
    return {
        "clients": clients,
        "duration_s": raw["elapsed_s"],
        "calls": calls,
        "calls_per_s": calls / raw["elapsed_s"] if raw["elapsed_s"] > 0 else None,
        "errors": raw["errors"],
        "error_samples": raw["error_samples"],
        "latency": summarize(every),
        "by_kind": {k: summarize(v) for k, v in latencies.items()},
        "series": per_second(raw["completions"], seconds),
        "daemon_cpu_s": raw["daemon_cpu_s"],
        "daemon_children_cpu_s": raw["daemon_children_cpu_s"],
        "client_cpu_s": raw["client_cpu_s"],
    }


def measure_readonly(run: Run, daemon: DaemonProcess) -> dict[str, Any]:
    """The read-only mix; with --profile, a second, sampled run for the profile."""
    plan = run.plan
    result = measure_load(
        run, daemon, "readonly", plan.readonly_clients, plan.readonly_s, plan.warmup_s
    )
    result["mix"] = {kind: "1/3" for kind in workload.READONLY_MIX}
    if run.profile_dir is not None:
        from bench import profile

        raw_path = run.profile_dir / "profile-readonly.txt"
        recorder = profile.start_recording(daemon.pid, plan.readonly_s, raw_path)
        profiled = measure_load(run, daemon, "readonly", plan.readonly_clients, plan.readonly_s, 0)
        _, stderr = recorder.communicate(timeout=60)
        if not raw_path.exists():
            raise RuntimeError(f"py-spy wrote no profile: {stderr.decode()[-1000:]}")
        summary = profile.summarize_collapsed(raw_path.read_text())
        rate = profiled["calls_per_s"] or 0
        title = f"Daemon profile under the read-only mix ({rate:.0f} calls/s while sampled)"
        (run.profile_dir / "profile-readonly.md").write_text(profile.render(summary, title))
        log(f"profile written to {run.profile_dir}")
    return result


def measure_churn(run: Run, daemon: DaemonProcess, pool_size: int) -> dict[str, Any]:
    """Back-to-back sandboxed calls, then the containers left beyond the warm pool."""
    assert run.docker is not None
    plan = run.plan
    result = measure_load(run, daemon, "bash", plan.churn_clients, plan.churn_s, plan.warmup_s)
    remaining = run.docker.wait_at_most(daemon.config.instance_id, pool_size, 30)
    result["leaked_running"] = max(0, remaining - pool_size)
    return result


def measure_batch(run: Run, daemon: DaemonProcess) -> dict[str, Any]:
    """ExecuteBatch of 10 Grep against the same 10 sequential Execute calls."""
    raw = run_client(
        run.spec(
            "batch",
            daemon,
            tree=str(run.tree),
            patterns=list(workload.NEEDLES),
            rounds=run.plan.batch_rounds,
        ),
        timeout_s=900,
    )
    return {
        "files": run.plan.tree_files,
        "calls_per_batch": len(workload.NEEDLES),
        "rounds": run.plan.batch_rounds,
        "batch": summarize(raw["batch"]),
        "sequential": summarize(raw["sequential"]),
        "errors": raw["errors"],
        "error_samples": raw["error_samples"],
    }


def measure_sandbox_warm(run: Run, daemon: DaemonProcess, pool_size: int) -> dict[str, Any]:
    """Bash `echo hi` served by a warm container."""
    plan = run.plan
    raw = run_client(
        run.spec(
            "sandbox_warm",
            daemon,
            n=plan.warm_n,
            pool_size=pool_size,
            settle_s=plan.settle_s,
            pool_timeout_s=30,
        ),
        timeout_s=900,
    )
    return {
        "warm": summarize(raw["warm"]),
        **{k: raw[k] for k in ("errors", "error_samples", "pool_not_ready", "daemon_cpu_s")},
    }


def measure_flood(run: Run, daemon: DaemonProcess) -> dict[str, Any]:
    """A Bash command flooding its output."""
    assert run.docker is not None
    return run_client(
        run.spec("flood", daemon, bytes=run.plan.flood_bytes, image=run.docker.image, sample_ms=20),
        timeout_s=900,
    )


def measure_cold(run: Run) -> dict[str, Any]:
    """A daemon without a warm pool, against `docker run` in the same client loop."""
    assert run.docker is not None
    daemon = run.start_daemon("cold", pool_size=0)
    try:
        raw = run_client(
            run.spec(
                "sandbox_cold",
                daemon,
                n=run.plan.cold_n,
                image=run.docker.image,
                settle_s=run.plan.settle_s,
            ),
            timeout_s=900,
        )
    finally:
        daemon.stop()
        left = run.docker.remove_all(daemon.config.instance_id)
    if left:
        raw["errors"] += left
        raw["error_samples"].append(f"{left} containers left after the cold daemon stopped")
    return {
        "cold": summarize(raw["cold"]),
        "docker_run": summarize(raw["docker_run"]),
        "errors": raw["errors"],
        "error_samples": raw["error_samples"],
    }


def _version(argv: list[str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except OSError:
        return "?"
    return done.stdout.strip().splitlines()[0] if done.stdout.strip() else "?"


def machine(docker: Docker | None) -> dict[str, Any]:
    """What the numbers were measured on."""
    revision = _version(["git", "-C", str(processes.ROOT), "rev-parse", "--short", "HEAD"])
    dirty = _version(
        [
            "git",
            "-C",
            str(processes.ROOT),
            "status",
            "--porcelain",
            "--",
            "daemon",
            "sandbox",
            "policies",
        ]
    )
    opa = _version([str(processes.OPA_BINARY), "version"]).removeprefix("Version: ")
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "docker": docker.version if docker else "unavailable",
        "image": docker.image if docker else "",
        "opa": opa,
        "git_revision": revision + ("-dirty" if dirty not in ("", "?") else ""),
    }


NOTES = [
    "One OPA server (`opa run --server` with the flags of the managed OPA, decision logging "
    "included) serves both the daemon (TOOLJAIL_OPA__URL) and the baseline query, which asks "
    "for data.tooljail.authz.decision with the very input the daemon sent (taken from OPA's "
    "decision log) through the daemon's own OPA client.",
    "The daemon is `tooljail serve` in its own process; the load comes from `python -m "
    "bench.client` processes over the Unix socket, one gRPC connection per simulated client.",
    "Read-only mix: each client opens a session of its own over a 24-file project and cycles "
    "Read (one whole file), Glob (**/*.py) and Grep (files matching a pattern), in equal shares.",
    "Warm sandbox calls are spaced: each waits until Admin.Status shows a full pool, then "
    "a short settle pause. Cold calls run on a second daemon with pool size 0, interleaved "
    "with `docker run --rm` (docker SDK `containers.run(remove=True)`, which waits for the "
    "removal as the CLI does).",
    "CPU per call: utime+stime of the daemon process from /proc/<pid>/stat around the measured "
    "window, divided by the calls in it; ripgrep child processes are counted apart.",
    "Flood: VmRSS of the daemon sampled every 20 ms during the call; `docker run` baseline "
    "streams the same output through an attach, as the CLI does, and drops it.",
    "The machine is shared (2 cores for daemon, OPA, client and Docker): compare ratios.",
]


def execute(run: Run) -> None:
    """Every part, in an order that keeps each one's leftovers out of the next."""
    plan = run.plan
    run.opa = OpaServer(run.work)
    daemon = run.start_daemon("main", plan.pool_size)
    run.daemon = daemon
    try:
        run.part("decision", lambda: measure_decision(run, daemon))
        run.part("readonly", lambda: measure_readonly(run, daemon))
        run.part("batch", lambda: measure_batch(run, daemon))
        if run.docker is None:
            for name in ("sandbox", "churn", "flood"):
                run.skip(name, run.docker_problem)
        else:
            run.part("sandbox", lambda: measure_sandbox_warm(run, daemon, plan.pool_size))
            run.part("churn", lambda: measure_churn(run, daemon, plan.pool_size))
            run.part("flood", lambda: measure_flood(run, daemon))
    finally:
        code = daemon.stop()
        if code not in (0, None):
            run.failures.append(
                {"part": "daemon", "error": f"exited with {code}: {daemon.log_tail()}"}
            )
    if run.docker is not None:
        left = run.docker.remove_all(daemon.config.instance_id)
        if "churn" in run.parts:
            run.parts["churn"]["leaked_after_stop"] = left
        elif left:
            run.failures.append({"part": "daemon", "error": f"{left} containers left after stop"})
        cold: dict[str, Any] = {}
        run.part("cold", lambda: cold.update(measure_cold(run)) or cold)
        if "sandbox" in run.parts and cold:
            errors = run.parts["sandbox"]["errors"] + cold.pop("errors")
            samples = run.parts["sandbox"]["error_samples"] + cold.pop("error_samples")
            run.parts["sandbox"].update(cold, errors=errors, error_samples=samples)
            run.parts.pop("cold", None)
    else:
        run.skip("cold", run.docker_problem)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; see the module docstring."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="every part for about a second")
    parser.add_argument(
        "--out",
        type=Path,
        help="where to write (default: bench/results/, or a "
        "temporary folder that is removed afterwards for --smoke)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also sample the daemon with py-spy during a second read-only run",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs, audit)")
    args = parser.parse_args(argv)
    plan = SMOKE if args.smoke else FULL
    started_at = datetime.datetime.now(datetime.UTC)
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="tjb-"))  # short: Unix socket paths are limited
    scratch_out = args.smoke and args.out is None
    out = args.out or (work / "results" if args.smoke else RESULTS_DIR)
    docker, problem = None, ""
    try:
        docker = Docker()
    except Exception as exc:  # noqa: BLE001 - no engine, no image: the sandbox parts are skipped
        problem = f"Docker is not usable ({exc})"
    run = Run(plan=plan, work=work, docker=docker, docker_problem=problem)
    if args.profile:
        run.profile_dir = out
        out.mkdir(parents=True, exist_ok=True)
    log(f"{plan.mode} run in {work}, results to {out}")
    try:
        run.workspace = workload.make_workspace(work)
        run.tree = workload.make_tree(run.workspace, plan.tree_files)
        execute(run)
    except Exception as exc:  # noqa: BLE001 - reported below, with whatever was measured
        run.failures.append({"part": "setup", "error": f"{type(exc).__name__}: {exc}"[:2000]})
        log(f"run FAILED: {exc}")
    finally:
        if run.opa is not None:
            run.opa.stop()
    results = report.build_results(
        run.parts,
        {
            "mode": plan.mode,
            "started": started_at.isoformat(timespec="seconds"),
            "duration_s": time.monotonic() - started,
            "machine": machine(docker),
            "plan": plan.as_dict(),
            "failures": run.failures,
            "notes": NOTES,
        },
    )
    written = report.write_all(results, out)
    print(report.render_markdown(results))
    log("wrote " + ", ".join(str(p) for p in written))
    if args.keep:
        log(f"work folder kept: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    if scratch_out:
        shutil.rmtree(out, ignore_errors=True)
    crashed = [f for f in run.failures if not f["error"].startswith("skipped")]
    if crashed:
        log(f"{len(crashed)} part(s) failed: " + "; ".join(f["part"] for f in crashed))
        return 1
    if args.smoke and run.errors:
        log(f"{run.errors} call(s) answered with an error")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
