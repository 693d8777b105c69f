"""The sandboxed scenarios of the client: warm and cold Bash calls against `docker run`, and an
output flood with the daemon's memory sampled all along."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench import peers, phases, workload
from bench.calls import Spec, Tally, cpu, execute_request, open_channel, text_of, timed_execute
from bench.processes import memory_kib
from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon._generated.tooljail.v1 import executor_pb2_grpc as pb_grpc

#: The samples of the warm part: tooljail's warm Bash and its peers, interleaved.
PEERS = ("warm", "docker_run", "docker_exec", "llm_sandbox")
#: Also interleaved: a health Check started as the warm calls are (pool full, settle pause),
#: the floor of what a call waits outside the daemon (gRPC, both processes waking up).
HEALTH_SPACED = "health_spaced"
#: And OPA asked the warm calls' own question (a Bash command's decision input, as the daemon
#: sends it) the same way: the floor of their decision.
OPA_SPACED = "opa_bash_spaced"
SPACED = (HEALTH_SPACED, OPA_SPACED)


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
    do: the pool is refilled and the previous container removed before the next call),
    interleaved with the peers running the same command on the same image: `docker run`,
    `docker exec` into a running container, and llm-sandbox's `execute_command` in one open
    session. Every sample, tooljail's or a peer's, starts on a full pool and a quiet engine; the
    order rotates every round."""
    from daemon.policy.opa_client import client_for
    from daemon.policy.opa_engine import PACKAGE

    tally = Tally()
    samples: dict[str, list[float]] = {name: [] for name in (*PEERS, *SPACED)}
    pool_misses = 0
    async with (
        open_channel(spec["target"]) as channel,
        client_for(spec["opa_url"], spec["opa_timeout_s"]) as opa,
    ):
        stub, admin = pb_grpc.ExecutorStub(channel), pb_grpc.AdminStub(channel)
        health = health_pb2_grpc.HealthStub(channel)

        async def tooljail() -> None:
            request = execute_request("Bash", workload.bash_input("echo hi"))
            elapsed, _ = await timed_execute(stub, request, tally, spec["timeout_s"], "hi")
            samples["warm"].append(elapsed)

        async def health_check() -> None:
            started = time.perf_counter()
            await health.Check(health_pb2.HealthCheckRequest(), timeout=spec["timeout_s"])
            samples[HEALTH_SPACED].append(time.perf_counter() - started)

        async def opa_query() -> None:
            started = time.perf_counter()
            answer = await opa.query_rule(spec["opa_input"], PACKAGE, "decision")
            samples[OPA_SPACED].append(time.perf_counter() - started)
            if answer.get("result", {}).get("outcome") != "allow":
                tally.add(f"OPA answered {str(answer)[:300]}")

        own = {"warm": tooljail, HEALTH_SPACED: health_check, OPA_SPACED: opa_query}

        with peers.peer_containers(spec["image"]) as (client, target, session, missing):
            blocking: dict[str, Callable[[], None]] = {
                "docker_run": lambda: peers.docker_run(client, spec["image"]),
                "docker_exec": target.exec,
            }
            if session is not None:
                blocking["llm_sandbox"] = session.exec
            order = [*own, *blocking]
            metrics_before = phases.scrape(spec["metrics_url"])
            cpu_before = cpu(spec["daemon_pid"])
            for round_ in range(spec["n"]):
                for name in order[round_ % len(order) :] + order[: round_ % len(order)]:
                    if not await _pool_ready(admin, spec["pool_size"], spec["pool_timeout_s"]):
                        pool_misses += name == "warm"  # measured anyway: what a caller gets
                    await asyncio.sleep(spec["settle_s"])
                    if name in own:
                        await own[name]()
                        continue
                    started = time.perf_counter()
                    try:
                        await asyncio.to_thread(blocking[name])
                    except Exception as exc:  # noqa: BLE001 - a failed peer is an error
                        tally.add(f"{name}: {type(exc).__name__}: {exc}"[:300])
                        continue
                    samples[name].append(time.perf_counter() - started)
            await _pool_ready(admin, spec["pool_size"], spec["pool_timeout_s"])
            cpu_after = cpu(spec["daemon_pid"])
            metrics_after = phases.scrape(spec["metrics_url"])
    warm, floor = samples["warm"], samples[HEALTH_SPACED]
    means = phases.phase_means_ms(metrics_before, metrics_after, "Bash", len(warm))
    return {
        **samples,
        "phases": phases.breakdown(means, _mean_ms(warm), _mean_ms(floor)),
        **tally.as_dict(),
        "llm_sandbox_missing": missing,
        "pool_not_ready": pool_misses,
        "daemon_cpu_s": cpu_after[0] - cpu_before[0],
    }


def _mean_ms(samples: list[float]) -> float | None:
    return sum(samples) * 1000 / len(samples) if samples else None


async def bash_spaced(spec: Spec) -> dict[str, Any]:
    """Warm Bash `echo hi` calls `spacing_s` apart (time enough for the pool to refill) for
    `duration_s`: what the sandboxed path's profile samples, so nothing else is asked of the
    daemon meanwhile (not even Admin.Status, which checks the engine and OPA)."""
    tally = Tally()
    samples: list[float] = []
    async with open_channel(spec["target"]) as channel:
        stub = pb_grpc.ExecutorStub(channel)
        deadline = time.monotonic() + spec["duration_s"]
        while time.monotonic() < deadline:
            await asyncio.sleep(spec["spacing_s"])
            request = execute_request("Bash", workload.bash_input("echo hi"))
            elapsed, _ = await timed_execute(stub, request, tally, spec["timeout_s"], "hi")
            samples.append(elapsed)
    return {"warm": samples, **tally.as_dict()}


def _docker_run(image: str, command: str) -> bytes:
    import docker

    client = docker.from_env(version="auto")
    try:
        # Without a network, like the sandbox: a bridge endpoint is work the sandbox never does.
        output: bytes = client.containers.run(
            image, ["bash", "-c", command], remove=True, network_mode="none"
        )
        return output
    finally:
        client.close()


async def sandbox_cold(spec: Spec) -> dict[str, Any]:
    """Bash `echo hi` on a daemon without a warm pool, interleaved with `docker run --rm` of the
    same image and command through the docker SDK."""
    tally = Tally()
    cold: list[float] = []
    plain: list[float] = []
    async with open_channel(spec["target"]) as channel:
        stub = pb_grpc.ExecutorStub(channel)
        for _ in range(spec["n"]):
            request = execute_request("Bash", workload.bash_input("echo hi"))
            elapsed, _ = await timed_execute(stub, request, tally, spec["timeout_s"], "hi")
            cold.append(elapsed)
            await asyncio.sleep(spec["settle_s"])
            started = time.perf_counter()
            output = await asyncio.to_thread(_docker_run, spec["image"], "echo hi")
            plain.append(time.perf_counter() - started)
            if output != b"hi\n":
                tally.add(f"docker run printed {output[:100]!r}")
            await asyncio.sleep(spec["settle_s"])
    return {"cold": cold, "docker_run": plain, **tally.as_dict()}


def _docker_run_streamed(image: str, command: str) -> int:
    """`docker run` as the CLI does it (attach, start, stream the output, wait, remove); the
    output is counted and dropped. Returns the bytes received."""
    import docker
    from docker.types import LogConfig

    client = docker.from_env(version="auto")
    api = client.api
    # Without a log driver: the default json-file driver writes one JSON entry per output line,
    # which makes `yes` crawl (about 2 s per MiB here) and would measure the log, not the run.
    host_config = api.create_host_config(
        log_config=LogConfig(type=LogConfig.types.NONE), network_mode="none"
    )
    container = api.create_container(image, ["bash", "-c", command], host_config=host_config)
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
    async with open_channel(spec["target"]) as channel:
        stub = pb_grpc.ExecutorStub(channel)
        tools = await stub.ListTools(pb.ListToolsRequest(), timeout=spec["timeout_s"])
        budget = next(t.traits.max_result_chars for t in tools.tools if t.name == "Bash")
        before = memory_kib(pid)
        sampler = _RssSampler(pid, spec["sample_ms"] / 1000)
        sampler.start()
        request = execute_request("Bash", workload.bash_input(command, spec["timeout_s"] * 1000))
        daemon_s, response = await timed_execute(stub, request, tally, spec["timeout_s"])
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
        "result_chars": len(text_of(response)) if response is not None else None,
        "budget_chars": budget,
        "truncated": report.truncated,
        "kept_output": bool(report.kept_output),
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
