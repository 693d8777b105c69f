"""The parts of the benchmark: each drives a daemon through one client scenario and turns the
raw samples into the numbers the goals are judged on."""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import grpc

from bench import peers, workload
from bench.client_sandbox import PEERS, SPACED
from bench.harness import Run, run_client
from bench.processes import PROBE_BASH_COMMAND, PROBE_READ_LIMIT, DaemonProcess
from bench.stats import per_second, summarize
from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon._generated.tooljail.v1 import executor_pb2_grpc as pb_grpc

PROFILE_S = 15.0
"""Seconds of each profiled load (--profile)."""
SPACING_S = 0.6
"""Between the sandboxed calls of the profile: the warm pool refills meanwhile."""
#: The baseline's OPA client is the daemon's, but with room: a slow answer is a sample, not a crash.
BASELINE_OPA_TIMEOUT_S = 30.0


def probe_read_input(run: Run, daemon: DaemonProcess) -> dict[str, Any]:
    """One Execute(Read) so that OPA logs the exact decision input the daemon sends for it (only
    a Read with the probe's limit is logged)."""
    assert run.opa is not None
    with grpc.insecure_channel(daemon.target) as channel:
        request = pb.ExecuteRequest()
        request.tool_use.id = "toolu_bench_probe"
        request.tool_use.name = "Read"
        request.tool_use.input.update(workload.read_input(run.workspace / workload.ONE_KB_FILE))
        request.tool_use.input["limit"] = PROBE_READ_LIMIT
        response = pb_grpc.ExecutorStub(channel).Execute(request, timeout=30)
    if response.decision.outcome != pb.ALLOW or response.result.is_error:
        text = "".join(b.text.text for b in response.result.content)
        raise RuntimeError(f"the probe Read did not succeed: {text[:500]}")
    return run.opa.decision_input("Read")


def probe_bash_input(run: Run, daemon: DaemonProcess) -> dict[str, Any]:
    """One Execute(Bash) of the probe command, so that OPA logs the exact decision input the
    daemon sends for a command shaped as the warm calls' (only that command is logged)."""
    assert run.opa is not None
    with grpc.insecure_channel(daemon.target) as channel:
        request = pb.ExecuteRequest()
        request.tool_use.id = "toolu_bench_probe_bash"
        request.tool_use.name = "Bash"
        request.tool_use.input.update(workload.bash_input(PROBE_BASH_COMMAND))
        response = pb_grpc.ExecutorStub(channel).Execute(request, timeout=120)
    if response.decision.outcome != pb.ALLOW or response.result.is_error:
        text = "".join(b.text.text for b in response.result.content)
        raise RuntimeError(f"the probe Bash did not succeed: {text[:500]}")
    return run.opa.decision_input("Bash")


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
            opa_timeout_s=BASELINE_OPA_TIMEOUT_S,
            opa_input=probe_read_input(run, daemon),
        ),
        timeout_s=600,
    )
    return {
        **{
            key: summarize(raw[key])
            for key in ("execute_read", "execute_read_fresh", "health", "opa")
        },
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
        "opa_cpu_s": raw["opa_cpu_s"],
        "machine_cpu_s": raw["machine_cpu_s"],
        "cpus": len(os.sched_getaffinity(0)),
    }


def measure_readonly(run: Run, daemon: DaemonProcess) -> dict[str, Any]:
    """The read-only mix under concurrent clients."""
    plan = run.plan
    result = measure_load(
        run, daemon, "readonly", plan.readonly_clients, plan.readonly_s, plan.warmup_s
    )
    result["mix"] = {kind: "1/3" for kind in workload.READONLY_MIX}
    return result


def measure_floor(run: Run, daemon: DaemonProcess) -> dict[str, Any]:
    """What the gRPC server alone allows: the read-only clients calling health Check, which does
    no tooljail work at all."""
    plan = run.plan
    return measure_load(
        run, daemon, "health", plan.readonly_clients, plan.readonly_s / 3, plan.warmup_s
    )


def record_profiles(run: Run, daemon: DaemonProcess, out: Path) -> dict[str, Any]:
    """py-spy samples of the daemon on each path: the read-only clients calling Read only, then
    the mix, then spaced warm Bash calls (the sandboxed path); the collapsed stacks, a summary and
    a flame graph of each go to `out`."""
    from bench import flamegraph, profile

    plan, found = run.plan, {}
    seconds = min(plan.readonly_s, PROFILE_S)
    for kind, title in (
        ("read", "Read only"),
        ("readonly", "the read-only mix"),
        ("sandboxed", "warm Bash `echo hi`, spaced"),
    ):
        if kind == "sandboxed" and run.docker is None:
            continue
        raw_path = out / f"profile-{kind}.txt"
        # Spaced sandboxed calls keep the daemon busy a small part of the time: sampled more
        # densely, without native frames (each such sample pauses the daemon longer).
        sandboxed = kind == "sandboxed"
        recorder = profile.start_recording(
            daemon.pid, seconds, raw_path, rate_hz=500 if sandboxed else 100, native=not sandboxed
        )
        profiled = _profiled_load(run, daemon, kind, seconds)
        _, stderr = recorder.communicate(timeout=60)
        if recorder.returncode != 0 or not raw_path.exists():
            raise RuntimeError(f"py-spy failed: {stderr.decode()[-1000:]}")
        collapsed = raw_path.read_text()
        summary = profile.summarize_collapsed(collapsed)
        heading = f"Daemon profile, {title} ({profiled['what']} while sampled)"
        (out / f"profile-{kind}.md").write_text(profile.render(summary, heading))
        (out / f"profile-{kind}.svg").write_text(flamegraph.render_svg(collapsed, heading))
        found[kind] = {"samples": summary.samples, "errors": profiled["errors"]}
    return {**found, "errors": sum(p["errors"] for p in found.values())}


def _profiled_load(run: Run, daemon: DaemonProcess, kind: str, seconds: float) -> dict[str, Any]:
    """The load a profile samples, and what it amounted to, for people."""
    plan = run.plan
    if kind != "sandboxed":
        load = measure_load(run, daemon, kind, plan.readonly_clients, seconds, 0)
        cpu_ms = load["daemon_cpu_s"] * 1000 / max(1, load["calls"])
        return {
            "errors": load["errors"],
            "what": f"{plan.readonly_clients} clients, {load['calls_per_s'] or 0:.0f} calls/s, "
            f"{cpu_ms:.2f} ms of daemon CPU per call",
        }
    raw = run_client(
        run.spec(
            "bash_spaced",
            daemon,
            duration_s=seconds,
            spacing_s=SPACING_S,
        ),
        timeout_s=seconds + 300,
    )
    warm = summarize(raw["warm"])
    return {
        "errors": raw["errors"],
        "what": f"{warm.get('n', 0)} calls, p50 {warm.get('p50_ms', 0):.1f} ms",
    }


def measure_churn(run: Run, daemon: DaemonProcess, pool_size: int) -> dict[str, Any]:
    """Back-to-back sandboxed calls, then the containers left beyond the warm pool."""
    assert run.docker is not None
    plan = run.plan
    result = measure_load(
        run, daemon, "bash", plan.churn_clients, plan.churn_s, plan.churn_warmup_s
    )
    remaining = run.docker.wait_at_most(daemon.config.instance_id, pool_size, 30)
    result["leaked_running"] = max(0, remaining - pool_size)
    return result


def ripgrep_threads(tree: Path, repeats: int = 3) -> dict[str, Any]:
    """How much faster one ripgrep search of the tree is with its own threads than with one:
    the batch's parallel Greps can only add what a single search leaves of the cores."""
    rg = shutil.which("rg")
    if rg is None:
        return {}

    def median_s(*flags: str) -> float:
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            for needle in workload.NEEDLES:
                subprocess.run(
                    [rg, *flags, "--files-with-matches", needle, str(tree)],
                    stdout=subprocess.DEVNULL,
                    check=False,
                )
            times.append(time.perf_counter() - started)
        return statistics.median(times)

    one, default = median_s("--threads", "1"), median_s()
    return {"rg_one_thread_s": one, "rg_default_threads_s": default}


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
        "shared_calls": min(raw["shared_calls"], default=0),
        **ripgrep_threads(run.tree),
        "errors": raw["errors"],
        "error_samples": raw["error_samples"],
    }


def measure_sandbox_warm(run: Run, daemon: DaemonProcess, pool_size: int) -> dict[str, Any]:
    """Bash `echo hi` served by a warm container, interleaved with its peers (bench.peers)."""
    assert run.docker is not None and run.opa is not None
    plan = run.plan
    raw = run_client(
        run.spec(
            "sandbox_warm",
            daemon,
            n=plan.warm_n,
            pool_size=pool_size,
            settle_s=plan.settle_s,
            pool_timeout_s=30,
            image=run.docker.image,
            opa_url=run.opa.url,
            opa_timeout_s=BASELINE_OPA_TIMEOUT_S,
            opa_input=probe_bash_input(run, daemon),
        ),
        timeout_s=900,
    )
    return {
        **{name: summarize(raw[name]) for name in (*PEERS, *SPACED) if raw[name]},
        **{
            k: raw[k]
            for k in (
                "errors",
                "error_samples",
                "pool_not_ready",
                "daemon_cpu_s",
                "llm_sandbox_missing",
                "phases",
            )
        },
    }


def measure_engine_churn(run: Run) -> dict[str, Any]:
    """The bare engine doing what a sandboxed call costs it, with as many workers as the churn
    part's clients and for as long: the floor tooljail's churn is compared with."""
    assert run.docker is not None
    plan = run.plan
    instance_id = f"bench-{uuid.uuid4().hex[:8]}-engine"
    result = peers.bare_churn(
        run.docker.image, run.workspace, instance_id, plan.churn_clients, plan.churn_s
    )
    # Containers whose removal was still under way get the time a daemon's would.
    leaked = run.docker.wait_at_most(instance_id, 0, 30)
    run.docker.remove_all(instance_id)
    if leaked:
        result["errors"] += leaked
        result["error_samples"].append(f"{leaked} containers left")
    return result


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
