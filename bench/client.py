"""The load-generating client: a process of its own, so the daemon is measured from outside.

`python -m bench.client` reads one scenario (JSON) on stdin, runs it against a daemon over gRPC
(asyncio, one channel and connection per simulated client) and prints raw samples (JSON) on
stdout: latencies in seconds, completion times, errors with a few example messages, and the
daemon's CPU counters read from /proc around the measured window.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench import workload
from bench.calls import (
    Spec,
    Tally,
    client_cpu_s,
    cpu,
    execute_request,
    open_channel,
    problem_of,
    timed_execute,
)
from bench.client_sandbox import bash_spaced, flood, sandbox_cold, sandbox_warm
from bench.processes import machine_busy_s
from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon._generated.tooljail.v1 import executor_pb2_grpc as pb_grpc


async def decision(spec: Spec) -> dict[str, Any]:
    """Execute(Read 1 KB), a health Check and OPA's decision query, one at a time, interleaved
    so that all see the same machine state. The Read is sent twice per round: as the same input
    every time (the shipped policy lets the daemon reuse that decision) and with a `limit` that
    changes every round (a new input: the daemon must ask OPA)."""
    from daemon.policy.opa_client import client_for
    from daemon.policy.opa_engine import PACKAGE

    tally = Tally()
    samples: dict[str, list[float]] = {
        "execute_read": [],
        "execute_read_fresh": [],
        "health": [],
        "opa": [],
    }
    read = workload.read_input(Path(spec["read_path"]))
    async with (
        open_channel(spec["target"]) as channel,
        client_for(spec["opa_url"], spec["opa_timeout_s"]) as opa,
    ):
        stub = pb_grpc.ExecutorStub(channel)
        health = health_pb2_grpc.HealthStub(channel)

        async def check() -> None:
            await health.Check(health_pb2.HealthCheckRequest(), timeout=spec["timeout_s"])

        async def query() -> None:
            answer = await opa.query_rule(spec["opa_input"], PACKAGE, "decision")
            if answer.get("result", {}).get("outcome") != "allow":
                tally.add(f"OPA answered {str(answer)[:300]}")

        cpu_before = cpu(spec["daemon_pid"])
        for index in range(spec["warmup"] + spec["n"]):
            keep = index >= spec["warmup"]
            elapsed, _ = await timed_execute(
                stub, execute_request("Read", read), tally, spec["timeout_s"]
            )
            for name, call in (("health", check), ("opa", query)):
                started = time.perf_counter()
                await call()
                if keep:
                    samples[name].append(time.perf_counter() - started)
            # Past the file's end, so the answer is the same whole file.
            fresh = {**read, "limit": 100_000 + index}
            fresh_elapsed, _ = await timed_execute(
                stub, execute_request("Read", fresh), tally, spec["timeout_s"]
            )
            if keep:
                samples["execute_read"].append(elapsed)
                samples["execute_read_fresh"].append(fresh_elapsed)
        cpu_after = cpu(spec["daemon_pid"])
    calls = 2 * (spec["warmup"] + spec["n"])
    return {
        **samples,
        **tally.as_dict(),
        "daemon_cpu_s": cpu_after[0] - cpu_before[0],
        "daemon_calls": calls,
    }


async def _open_session(channel: grpc.aio.Channel, timeout_s: float) -> pb.Session:
    stub = pb_grpc.ExecutorStub(channel)
    session: pb.Session = await stub.OpenSession(pb.OpenSessionRequest(), timeout=timeout_s)
    return session


async def _timed_check(channel: grpc.aio.Channel, tally: Tally, timeout_s: float) -> float:
    """One grpc health Check: the least any RPC costs the daemon."""
    started = time.perf_counter()
    try:
        await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=timeout_s
        )
    except grpc.RpcError as exc:
        tally.add(f"health Check failed: {exc}")
    return time.perf_counter() - started


async def load(spec: Spec) -> dict[str, Any]:
    """`clients` simulated clients calling back to back: a warm-up, then `duration_s` measured.
    `kind` "readonly": each client opens a session of its own over a small project and cycles
    Read, Glob, Grep ("read": Read only); "bash": Bash `echo hi` in the default session;
    "health": grpc health Checks (what the gRPC server alone costs per call)."""
    clients, timeout_s = spec["clients"], spec["timeout_s"]
    tally = Tally()
    latencies: dict[str, list[float]] = {}
    completions: list[float] = []
    channels = [open_channel(spec["target"]) for _ in range(clients)]
    sessions: list[pb.Session] = []
    plans: list[list[tuple[str, dict[str, Any]]]] = []
    for channel in channels:
        if spec["kind"] in ("readonly", "read"):
            session = await _open_session(channel, timeout_s)
            sessions.append(session)
            workspace = Path(session.workspace)
            files = workload.populate_session(workspace)
            inputs = {
                "Read": [workload.read_input(p) for p in files],
                "Glob": [workload.glob_input(workspace)],
                "Grep": [workload.grep_input(workspace, "def handle_1")],
            }
            mix = workload.READONLY_MIX if spec["kind"] == "readonly" else ("Read",)
            plans.append(
                [
                    (kind, inputs[kind][i % len(inputs[kind])])
                    for i in range(len(files))
                    for kind in mix
                ]
            )
        elif spec["kind"] == "health":
            plans.append([("Health", {})])
        else:
            plans.append([("Bash", workload.bash_input("echo hi"))])
    expect = "hi" if spec["kind"] == "bash" else None
    start = time.perf_counter()
    measure_from = start + spec["warmup_s"]
    deadline = measure_from + spec["duration_s"]
    marks: dict[str, Any] = {}

    async def mark_start() -> None:
        await asyncio.sleep(max(0.0, measure_from - time.perf_counter()))
        marks["cpu"], marks["client_cpu"] = cpu(spec["daemon_pid"]), client_cpu_s()
        marks["machine"] = machine_busy_s()
        marks["opa"] = cpu(spec["opa_pid"])[0] if spec.get("opa_pid") else 0.0

    async def client(index: int) -> None:
        stub = pb_grpc.ExecutorStub(channels[index])
        session_id = sessions[index].id if sessions else ""
        plan = plans[index]
        step = index  # clients start at different points of the mix
        while (now := time.perf_counter()) < deadline:
            kind, tool_input = plan[step % len(plan)]
            step += 1
            measured = now >= measure_from
            if kind == "Health":
                elapsed = await _timed_check(
                    channels[index], tally if measured else Tally(), timeout_s
                )
            else:
                elapsed, _ = await timed_execute(
                    stub,
                    execute_request(kind, tool_input, session_id),
                    tally if measured else Tally(),
                    timeout_s,
                    expect,
                )
            if measured:
                latencies.setdefault(kind, []).append(elapsed)
                completions.append(time.perf_counter() - measure_from)

    await asyncio.gather(mark_start(), *(client(i) for i in range(clients)))
    elapsed_s = time.perf_counter() - measure_from
    cpu_after, client_cpu_after = cpu(spec["daemon_pid"]), client_cpu_s()
    machine_after = machine_busy_s()
    opa_after = cpu(spec["opa_pid"])[0] if spec.get("opa_pid") else 0.0
    for channel, session in zip(channels, sessions, strict=False):
        request = pb.CloseSessionRequest(session_id=session.id, delete_workspace=True)
        await pb_grpc.ExecutorStub(channel).CloseSession(request, timeout=timeout_s)
    for channel in channels:
        await channel.close()
    return {
        "latencies": latencies,
        "completions": completions,
        "elapsed_s": elapsed_s,
        **tally.as_dict(),
        "daemon_cpu_s": cpu_after[0] - marks["cpu"][0],
        "daemon_children_cpu_s": cpu_after[1] - marks["cpu"][1],
        "client_cpu_s": client_cpu_after - marks["client_cpu"],
        "opa_cpu_s": opa_after - marks["opa"],
        "machine_cpu_s": machine_after - marks["machine"],
    }


async def batch(spec: Spec) -> dict[str, Any]:
    """10 Grep over the generated tree: one ExecuteBatch against 10 sequential Execute calls,
    alternating which goes first."""
    tally = Tally()
    tree = Path(spec["tree"])
    inputs = [workload.grep_input(tree, needle) for needle in spec["patterns"]]
    results: dict[str, list[float]] = {"batch": [], "sequential": []}
    shared_calls: list[int] = []
    """Per batch: calls whose summary says they shared one ripgrep walk."""
    async with open_channel(spec["target"]) as channel:
        stub = pb_grpc.ExecutorStub(channel)

        async def sequential() -> None:
            for tool_input in inputs:
                await timed_execute(
                    stub, execute_request("Grep", tool_input), tally, spec["timeout_s"]
                )

        async def batched() -> None:
            uses = [execute_request("Grep", tool_input).tool_use for tool_input in inputs]
            stream = stub.ExecuteBatch(
                pb.ExecuteBatchRequest(tool_uses=uses), timeout=spec["timeout_s"]
            )
            answered = shared = 0
            async for response in stream:
                answered += 1
                shared += "one search shared" in response.summary
                if problem := problem_of(response):
                    tally.add(problem)
            shared_calls.append(shared)
            if answered != len(uses):
                tally.add(f"ExecuteBatch answered {answered} of {len(uses)} calls")

        await sequential()  # warms the page cache for both
        for round_ in range(spec["rounds"]):
            order: list[tuple[str, Callable[[], Awaitable[None]]]] = [
                ("sequential", sequential),
                ("batch", batched),
            ]
            for name, run in order if round_ % 2 == 0 else order[::-1]:
                started = time.perf_counter()
                try:
                    await run()
                except grpc.aio.AioRpcError as exc:
                    tally.add(f"{exc.code().name}: {exc.details()}")
                results[name].append(time.perf_counter() - started)
    return {**results, "shared_calls": shared_calls, **tally.as_dict()}


SCENARIOS: dict[str, Callable[[Spec], Coroutine[Any, Any, dict[str, Any]]]] = {
    "decision": decision,
    "load": load,
    "sandbox_warm": sandbox_warm,
    "bash_spaced": bash_spaced,
    "sandbox_cold": sandbox_cold,
    "batch": batch,
    "flood": flood,
}


def main() -> int:
    """Run the scenario on stdin, print its samples on stdout."""
    spec = json.load(sys.stdin)
    result = asyncio.run(SCENARIOS[spec["scenario"]](spec))
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
