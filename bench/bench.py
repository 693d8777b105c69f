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
import datetime
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import parts, processes, readme, report, workload
from bench.egress import measure_egress
from bench.harness import Docker, Run, log
from bench.mcp import measure_mcp
from bench.plans import FULL, SMOKE
from bench.processes import OpaServer

RESULTS_DIR = processes.ROOT / "bench" / "results"


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
    "One OPA server (`opa run --server` with the flags of the managed OPA, which logs no "
    "decisions; this one logs the probe Read's alone, dropping the others unwritten) serves "
    "both the daemon (TOOLJAIL_OPA__URL) and the baseline query, which asks "
    "for data.tooljail.authz.decision with the very input the daemon sent (taken from OPA's "
    "decision log) through the daemon's own OPA client.",
    "The daemon is `tooljail serve` in its own process; the load comes from `python -m "
    "bench.client` processes over the Unix socket, one gRPC connection per simulated client.",
    "Read-only mix: each client opens a session of its own over a 24-file project and cycles "
    "Read (one whole file), Glob (**/*.py) and Grep (files matching a pattern), in equal shares.",
    "Warm sandbox calls are spaced: each waits until Admin.Status shows a full pool, then "
    "a short settle pause. Cold calls run on a second daemon with pool size 0, interleaved "
    "with `docker run --rm --network none` (docker SDK `containers.run(remove=True)`, which "
    "waits for the removal as the CLI does; no network, like the sandbox).",
    "CPU per call: utime+stime of the daemon process from /proc/<pid>/stat around the measured "
    "window, divided by the calls in it; ripgrep child processes are counted apart.",
    "Flood: VmRSS of the daemon sampled every 20 ms during the call. The `docker run` baseline "
    "attaches, starts and streams the same output as the CLI does, and drops it; it runs with "
    "`--network none --log-driver none`: the default json-file driver writes one entry per "
    "line, and `yes` then crawls at about 2 s per MiB here (1 GiB would take over half an hour).",
    "The machine is shared (2 cores for daemon, OPA, client and Docker): compare ratios.",
]


def execute(run: Run) -> None:
    """Every part, in an order that keeps each one's leftovers out of the next."""
    plan = run.plan
    run.opa = OpaServer(run.work)
    daemon = run.start_daemon("main", plan.pool_size)
    run.daemon = daemon
    try:
        run.part("decision", lambda: parts.measure_decision(run, daemon))
        run.part("readonly", lambda: parts.measure_readonly(run, daemon))
        run.part("floor", lambda: parts.measure_floor(run, daemon))
        if run.profile_dir is not None:
            profile_dir = run.profile_dir
            run.part("profile", lambda: parts.record_profiles(run, daemon, profile_dir))
        run.part("batch", lambda: parts.measure_batch(run, daemon))
        run.part(
            "egress",
            lambda: measure_egress(run.work / "egress", plan.egress_connects, plan.egress_bytes),
        )
        run.part("mcp", lambda: measure_mcp(run.work / "mcp", plan.mcp_calls))
        if run.docker is None:
            for name in ("sandbox", "churn", "engine_churn", "flood"):
                run.skip(name, run.docker_problem)
        else:
            run.part("sandbox", lambda: parts.measure_sandbox_warm(run, daemon, plan.pool_size))
            run.part("churn", lambda: parts.measure_churn(run, daemon, plan.pool_size))
            run.part("engine_churn", lambda: parts.measure_engine_churn(run))
            run.part("flood", lambda: parts.measure_flood(run, daemon))
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
        run.part("cold", lambda: parts.measure_cold(run))
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
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated parts to run (decision, readonly, floor, profile, batch, egress, "
        "mcp, sandbox, churn, engine_churn, flood, cold); the others are left out of the results",
    )
    args = parser.parse_args(argv)
    plan = SMOKE if args.smoke else FULL
    started_at = datetime.datetime.now(datetime.UTC)
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="tjb-"))  # short: Unix socket paths are limited
    scratch_out = args.smoke and args.out is None and not args.keep
    out = args.out or (work / "results" if args.smoke else RESULTS_DIR)
    docker, problem = None, ""
    try:
        docker = Docker()
    except Exception as exc:  # noqa: BLE001 - no engine, no image: the sandbox parts are skipped
        problem = f"Docker is not usable ({exc})"
    only = frozenset(part for part in args.only.split(",") if part)
    run = Run(plan=plan, work=work, docker=docker, docker_problem=problem, only=only)
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
    if out == RESULTS_DIR and not only and not args.smoke:
        # The published run: the README's table is written from it, never by hand.
        readme.update(results_path=out / report.JSON_NAME)
        log(f"README.md: performance table rewritten from {out / report.JSON_NAME}")
    if args.keep:
        log(f"work folder kept: {work}")
    else:
        processes.unmount_below(work)
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
