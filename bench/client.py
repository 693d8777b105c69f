"""The load-generating client: a process of its own, so the daemon is measured from outside.

`python -m bench.client` reads one scenario (JSON) on stdin, runs it against a daemon over gRPC
(asyncio, one channel and connection per simulated client) and prints raw samples (JSON) on
stdout: latencies in seconds, completion times, errors with a few example messages, and the
daemon's CPU counters read from /proc around the measured window.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import resource
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench import workload
from bench.processes import cpu_seconds, memory_kib
from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon._generated.tooljail.v1 import executor_pb2_grpc as pb_grpc

Spec = dict[str, Any]
_ids = itertools.count()
_MAX_ERROR_SAMPLES = 5


def _channel(target: str) -> grpc.aio.Channel:
    # A local subchannel pool gives each simulated client a connection of its own.
    return grpc.aio.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)])


def _request(name: str, tool_input: dict[str, Any], session_id: str = "") -> pb.ExecuteRequest:
    request = pb.ExecuteRequest(session_id=session_id)
    request.tool_use.id = f"toolu_bench_{next(_ids):08d}"
    request.tool_use.name = name
    request.tool_use.input.update(tool_input)
    return request


def _text(response: pb.ExecuteResponse) -> str:
    return "".join(b.text.text for b in response.result.content if b.HasField("text"))


def _problem(response: pb.ExecuteResponse, expect: str | None = None) -> str | None:
    """Why a response counts as an error, or None."""
    text = _text(response)
    if response.decision.outcome != pb.ALLOW:
        return f"{pb.Outcome.Name(response.decision.outcome)}: {text[:300]}"
    if response.result.is_error:
        return f"is_error: {text[:300]}"
    if expect is not None and text.strip() != expect:
        return f"expected {expect!r}, got {text[:300]!r}"
    return None


class Tally:
    """Errors of one scenario, with a few examples."""

    def __init__(self) -> None:
        self.errors = 0
        self.samples: list[str] = []

    def add(self, problem: str) -> None:
        self.errors += 1
        if len(self.samples) < _MAX_ERROR_SAMPLES:
            self.samples.append(problem)

    def as_dict(self) -> dict[str, Any]:
        return {"errors": self.errors, "error_samples": self.samples}


async def _timed_execute(
    stub: Any, request: pb.ExecuteRequest, tally: Tally, timeout_s: float, expect: str | None = None
) -> tuple[float, pb.ExecuteResponse | None]:
    started = time.perf_counter()
    try:
        response: pb.ExecuteResponse = await stub.Execute(request, timeout=timeout_s)
    except grpc.aio.AioRpcError as exc:
        tally.add(f"{exc.code().name}: {exc.details()}")
        return time.perf_counter() - started, None
    elapsed = time.perf_counter() - started
    if problem := _problem(response, expect):
        tally.add(problem)
    return elapsed, response


def _cpu(pid: int) -> tuple[float, float]:
    return cpu_seconds(pid)


def _client_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def decision(spec: Spec) -> dict[str, Any]:
    """Execute(Read 1 KB), a health Check and OPA's decision query, one at a time, interleaved
    so that all three see the same machine state."""
    from daemon.policy.opa_engine import PACKAGE, client_for

    tally = Tally()
    samples: dict[str, list[float]] = {"execute_read": [], "health": [], "opa": []}
    read = workload.read_input(Path(spec["read_path"]))
    async with (
        _channel(spec["target"]) as channel,
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

        cpu_before = _cpu(spec["daemon_pid"])
        for index in range(spec["warmup"] + spec["n"]):
            keep = index >= spec["warmup"]
            elapsed, _ = await _timed_execute(
                stub, _request("Read", read), tally, spec["timeout_s"]
            )
            for name, call in (("health", check), ("opa", query)):
                started = time.perf_counter()
                await call()
                if keep:
                    samples[name].append(time.perf_counter() - started)
            if keep:
                samples["execute_read"].append(elapsed)
        cpu_after = _cpu(spec["daemon_pid"])
    calls = spec["warmup"] + spec["n"]
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


async def load(spec: Spec) -> dict[str, Any]:
    """`clients` simulated clients calling back to back: a warm-up, then `duration_s` measured.
    `kind` "readonly": each client opens a session of its own over a small project and cycles
    Read, Glob, Grep; "bash": Bash `echo hi` in the default session."""
    clients, timeout_s = spec["clients"], spec["timeout_s"]
    tally = Tally()
    latencies: dict[str, list[float]] = {}
    completions: list[float] = []
    channels = [_channel(spec["target"]) for _ in range(clients)]
    sessions: list[pb.Session] = []
    plans: list[list[tuple[str, dict[str, Any]]]] = []
    for channel in channels:
        if spec["kind"] == "readonly":
            session = await _open_session(channel, timeout_s)
            sessions.append(session)
            workspace = Path(session.workspace)
            files = workload.populate_session(workspace)
            inputs = {
                "Read": [workload.read_input(p) for p in files],
                "Glob": [workload.glob_input(workspace)],
                "Grep": [workload.grep_input(workspace, "def handle_1")],
            }
            plans.append(
                [
                    (kind, inputs[kind][i % len(inputs[kind])])
                    for i in range(len(files))
                    for kind in workload.READONLY_MIX
                ]
            )
        else:
            plans.append([("Bash", workload.bash_input("echo hi"))])
    expect = "hi" if spec["kind"] == "bash" else None
    start = time.perf_counter()
    measure_from = start + spec["warmup_s"]
    deadline = measure_from + spec["duration_s"]
    marks: dict[str, Any] = {}

    async def mark_start() -> None:
        await asyncio.sleep(max(0.0, measure_from - time.perf_counter()))
        marks["cpu"], marks["client_cpu"] = _cpu(spec["daemon_pid"]), _client_cpu_s()

    async def client(index: int) -> None:
        stub = pb_grpc.ExecutorStub(channels[index])
        session_id = sessions[index].id if sessions else ""
        plan = plans[index]
        step = index  # clients start at different points of the mix
        while (now := time.perf_counter()) < deadline:
            kind, tool_input = plan[step % len(plan)]
            step += 1
            measured = now >= measure_from
            elapsed, _ = await _timed_execute(
                stub,
                _request(kind, tool_input, session_id),
                tally if measured else Tally(),
                timeout_s,
                expect,
            )
            if measured:
                latencies.setdefault(kind, []).append(elapsed)
                completions.append(time.perf_counter() - measure_from)

    await asyncio.gather(mark_start(), *(client(i) for i in range(clients)))
    elapsed_s = time.perf_counter() - measure_from
    cpu_after, client_cpu_after = _cpu(spec["daemon_pid"]), _client_cpu_s()
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
    }


async def _pool_ready(admin: Any, size: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = await admin.Status(pb.StatusRequest(), timeout=10)
        if status.pool_ready >= size:
            return True
        await asyncio.sleep(0.05)
    return False


async def sandbox_warm(spec: Spec) -> dict[str, Any]:
    """Bash `echo hi`, each call finding a settled, full warm pool (as an agent's spaced calls
    do: the pool is refilled and the previous container removed before the next call)."""
    tally = Tally()
    samples: list[float] = []
    pool_misses = 0
    async with _channel(spec["target"]) as channel:
        stub, admin = pb_grpc.ExecutorStub(channel), pb_grpc.AdminStub(channel)
        cpu_before = _cpu(spec["daemon_pid"])
        for _ in range(spec["n"]):
            if not await _pool_ready(admin, spec["pool_size"], spec["pool_timeout_s"]):
                pool_misses += 1  # measured anyway: it is what a caller would get
            await asyncio.sleep(spec["settle_s"])
            request = _request("Bash", workload.bash_input("echo hi"))
            elapsed, _ = await _timed_execute(stub, request, tally, spec["timeout_s"], "hi")
            samples.append(elapsed)
        await _pool_ready(admin, spec["pool_size"], spec["pool_timeout_s"])
        cpu_after = _cpu(spec["daemon_pid"])
    return {
        "warm": samples,
        **tally.as_dict(),
        "pool_not_ready": pool_misses,
        "daemon_cpu_s": cpu_after[0] - cpu_before[0],
    }


def _docker_run(image: str, command: str) -> bytes:
    import docker

    client = docker.from_env(version="auto")
    try:
        output: bytes = client.containers.run(image, ["bash", "-c", command], remove=True)
        return output
    finally:
        client.close()


async def sandbox_cold(spec: Spec) -> dict[str, Any]:
    """Bash `echo hi` on a daemon without a warm pool, interleaved with `docker run --rm` of the
    same image and command through the docker SDK."""
    tally = Tally()
    cold: list[float] = []
    plain: list[float] = []
    async with _channel(spec["target"]) as channel:
        stub = pb_grpc.ExecutorStub(channel)
        for _ in range(spec["n"]):
            request = _request("Bash", workload.bash_input("echo hi"))
            elapsed, _ = await _timed_execute(stub, request, tally, spec["timeout_s"], "hi")
            cold.append(elapsed)
            await asyncio.sleep(spec["settle_s"])
            started = time.perf_counter()
            output = await asyncio.to_thread(_docker_run, spec["image"], "echo hi")
            plain.append(time.perf_counter() - started)
            if output != b"hi\n":
                tally.add(f"docker run printed {output[:100]!r}")
            await asyncio.sleep(spec["settle_s"])
    return {"cold": cold, "docker_run": plain, **tally.as_dict()}


async def batch(spec: Spec) -> dict[str, Any]:
    """10 Grep over the generated tree: one ExecuteBatch against 10 sequential Execute calls,
    alternating which goes first."""
    tally = Tally()
    tree = Path(spec["tree"])
    inputs = [workload.grep_input(tree, needle) for needle in spec["patterns"]]
    results: dict[str, list[float]] = {"batch": [], "sequential": []}
    async with _channel(spec["target"]) as channel:
        stub = pb_grpc.ExecutorStub(channel)

        async def sequential() -> None:
            for tool_input in inputs:
                await _timed_execute(stub, _request("Grep", tool_input), tally, spec["timeout_s"])

        async def batched() -> None:
            uses = [_request("Grep", tool_input).tool_use for tool_input in inputs]
            stream = stub.ExecuteBatch(
                pb.ExecuteBatchRequest(tool_uses=uses), timeout=spec["timeout_s"]
            )
            answered = 0
            async for response in stream:
                answered += 1
                if problem := _problem(response):
                    tally.add(problem)
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
    return {**results, **tally.as_dict()}


def _docker_run_streamed(image: str, command: str) -> int:
    """`docker run` as the CLI does it (attach, start, stream the output, wait, remove); the
    output is counted and dropped. Returns the bytes received."""
    import docker

    client = docker.from_env(version="auto")
    api = client.api
    container = api.create_container(image, ["bash", "-c", command])
    try:
        stream = api.attach(container, stdout=True, stderr=True, stream=True)
        api.start(container)
        received = sum(len(chunk) for chunk in stream)
        api.wait(container)
        return received
    finally:
        api.remove_container(container, force=True)
        client.close()


class _RssSampler(threading.Thread):
    def __init__(self, pid: int, interval_s: float) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval_s = pid, interval_s
        self.peak_kib = memory_kib(pid)["VmRSS"]
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(self.interval_s):
            self.peak_kib = max(self.peak_kib, memory_kib(self.pid)["VmRSS"])


async def flood(spec: Spec) -> dict[str, Any]:
    """A Bash command printing `bytes` of output: the result's size, the daemon's RSS sampled
    all along, and the same command under `docker run`."""
    tally = Tally()
    command = f"yes | head -c {spec['bytes']}"
    pid = spec["daemon_pid"]
    async with _channel(spec["target"]) as channel:
        stub = pb_grpc.ExecutorStub(channel)
        tools = await stub.ListTools(pb.ListToolsRequest(), timeout=spec["timeout_s"])
        budget = next(t.traits.max_result_chars for t in tools.tools if t.name == "Bash")
        before = memory_kib(pid)
        sampler = _RssSampler(pid, spec["sample_ms"] / 1000)
        sampler.start()
        request = _request("Bash", workload.bash_input(command, spec["timeout_s"] * 1000))
        daemon_s, response = await _timed_execute(stub, request, tally, spec["timeout_s"])
        sampler.stopping.set()
        sampler.join()
        after = memory_kib(pid)
    started = time.perf_counter()
    received = await asyncio.to_thread(_docker_run_streamed, spec["image"], command)
    docker_s = time.perf_counter() - started
    if received != spec["bytes"]:
        tally.add(f"docker run streamed {received} bytes, expected {spec['bytes']}")
    report = response.report if response is not None else pb.ExecutionReport()
    return {
        "bytes": spec["bytes"],
        "result_chars": len(_text(response)) if response is not None else None,
        "budget_chars": budget,
        "truncated": report.truncated,
        "original_chars": report.original_chars,
        "daemon_s": daemon_s,
        "docker_run_s": docker_s,
        "rss_before_kib": before["VmRSS"],
        "rss_peak_kib": sampler.peak_kib,
        "hwm_before_kib": before["VmHWM"],
        "hwm_after_kib": after["VmHWM"],
        "rss_growth_mib": (sampler.peak_kib - before["VmRSS"]) / 1024,
        "sample_ms": spec["sample_ms"],
        **tally.as_dict(),
    }


SCENARIOS: dict[str, Callable[[Spec], Coroutine[Any, Any, dict[str, Any]]]] = {
    "decision": decision,
    "load": load,
    "sandbox_warm": sandbox_warm,
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
