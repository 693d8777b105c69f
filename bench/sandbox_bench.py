"""Sandbox latency benchmark: warm pool vs cold start vs plain `docker run`, measured in one run.

Usage (from the repository root, Docker running, the sandbox image built)::

    .venv/bin/python -m bench.sandbox_bench [--image REF] [-n 50] [--sustained 60] [--flood]

Prints p50/p95 of Bash `echo hi` through SandboxExecutor with a warm pool, p50 of the cold path
(pool size 0: create + attach + start + request), and p50 of
`docker run --rm <image> bash -c 'echo hi'` through the docker SDK, with the ratios. Warm calls are
spaced the way an agent spaces them (the pool is refilled and the previous container removed
before the next call is timed), so they measure a call that finds a settled warm container.
Cold and `docker run` samples are interleaved so that both see the same machine state.

`--sustained S` adds S seconds of back-to-back calls from 4 concurrent clients (calls/s, errors,
containers left after); `--flood` adds `yes | head -c 1G` (wall time, this process's peak RSS
growth, size of the kept output).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import docker
import docker.errors

from sandbox.backend import BashRequest, SandboxSpec, SandboxStartError
from sandbox.docker_backend import DockerBackend
from sandbox.executor import SandboxExecutor
from sandbox.image import LATEST_REF, default_image_ref
from sandbox.reaper import list_instance_containers
from sandbox.runner_stage import stage_runner

SETTLE_S = 0.3


def percentile(samples: list[float], pct: float) -> float:
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(pct / 100 * len(ordered)) - 1))
    return ordered[index]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:7.1f} ms"


async def timed(call: Callable[[], Awaitable[object]]) -> float:
    started = time.perf_counter()
    await call()
    return time.perf_counter() - started


def pick_image(client: docker.DockerClient, wanted: str | None) -> str:
    for ref in [wanted] if wanted else [default_image_ref(), LATEST_REF]:
        try:
            client.images.get(ref)
        except docker.errors.ImageNotFound:
            continue
        return ref
    raise SystemExit("the sandbox image is not built: run `make image` (or pass --image)")


def make_workspace() -> Path:
    workspace = Path(tempfile.mkdtemp(prefix="tj-bench-")).resolve()
    if os.geteuid() == 0:
        os.chown(workspace, 1000, 1000)  # as in real use: a non-root owner
    return workspace


async def bench_warm(executor: SandboxExecutor, spec: SandboxSpec, n: int) -> list[float]:
    request = BashRequest(command="echo hi", cwd=str(spec.workspace), timeout_ms=10_000)
    samples = []
    for _ in range(n):
        await executor.warm(spec)
        await asyncio.sleep(SETTLE_S)
        samples.append(await timed(lambda: check(executor.run(spec, request))))
    if executor.stats().pool_misses:
        raise SystemExit(f"warm benchmark hit the cold path: {executor.stats()}")
    return samples


async def check(call: Awaitable[object]) -> None:
    result = await call
    output = getattr(result, "output", None)
    if output != "hi\n":
        raise SystemExit(f"unexpected result: {result!r}")


async def bench_cold_and_docker_run(
    executor: SandboxExecutor, spec: SandboxSpec, client: docker.DockerClient, image: str, n: int
) -> tuple[list[float], list[float]]:
    request = BashRequest(command="echo hi", cwd=str(spec.workspace), timeout_ms=10_000)

    def docker_run() -> None:
        out = client.containers.run(image, ["bash", "-c", "echo hi"], remove=True)
        if out != b"hi\n":
            raise SystemExit(f"docker run printed {out!r}")

    cold, plain = [], []
    for _ in range(n):
        cold.append(await timed(lambda: check(executor.run(spec, request))))
        await asyncio.sleep(SETTLE_S)
        plain.append(await timed(lambda: asyncio.to_thread(docker_run)))
        await asyncio.sleep(SETTLE_S)
    return cold, plain


async def bench_sustained(
    backend: DockerBackend, spec: SandboxSpec, seconds: float, clients: int = 4
) -> None:
    executor = SandboxExecutor(backend, pool_size=clients, close_backend=False)
    request = BashRequest(command="echo hi", cwd=str(spec.workspace), timeout_ms=30_000)
    await executor.warm(spec)
    calls = errors = 0
    deadline = time.monotonic() + seconds

    async def client() -> None:
        nonlocal calls, errors
        while time.monotonic() < deadline:
            try:
                result = await executor.run(spec, request)
            except SandboxStartError:
                errors += 1
                continue
            calls += 1
            errors += result.output != "hi\n"

    started = time.monotonic()
    await asyncio.gather(*(client() for _ in range(clients)))
    elapsed = time.monotonic() - started
    stats = executor.stats()
    await executor.close()
    left = await asyncio.to_thread(list_instance_containers, backend.api, backend.instance_id)
    print(
        f"sustained ({clients} clients, {elapsed:.0f} s): {calls / elapsed:.1f} calls/s, "
        f"{errors} errors, warm {stats.pool_hits} / cold {stats.pool_misses}, "
        f"containers left after close: {len(left)}"
    )


async def bench_flood(executor: SandboxExecutor, spec: SandboxSpec) -> None:
    request = BashRequest(command="yes | head -c 1G", cwd=str(spec.workspace), timeout_ms=300_000)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    result = await executor.run(spec, request)
    wall = time.perf_counter() - started
    growth_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    print(
        f"flood (yes | head -c 1G): {wall:.2f} s, peak RSS growth {growth_mib:.1f} MiB, "
        f"output_bytes {result.output_bytes}, kept {len(result.output.encode())} bytes "
        f"(limit {request.output_limit_bytes})"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--image", help="sandbox image (default: the recipe's tag, else latest)")
    parser.add_argument("-n", type=int, default=50, help="samples per measurement")
    parser.add_argument("--sustained", type=float, default=0, help="seconds of sustained load")
    parser.add_argument("--flood", action="store_true", help="also measure a 1 GiB output flood")
    args = parser.parse_args()

    client = docker.from_env(version="auto")
    image = pick_image(client, args.image)
    workspace = make_workspace()
    info = workspace.stat()
    spec = SandboxSpec(
        workspace=workspace,
        workspace_id=(info.st_dev, info.st_ino),
        run_as=(info.st_uid, info.st_gid) if info.st_uid else (1000, 1000),
    )
    staged = Path(tempfile.mkdtemp(prefix="tj-bench-runner-"))  # as the daemon mounts it
    backend = DockerBackend(
        image=image,
        instance_id=f"bench-{uuid.uuid4().hex[:8]}",
        client=client,
        runner_source=stage_runner(staged / "runner"),
    )
    try:
        warm_executor = SandboxExecutor(backend, pool_size=2, close_backend=False)
        await warm_executor.warm(spec)  # first start pays one-off engine and cache costs
        warm = await bench_warm(warm_executor, spec, args.n)
        await warm_executor.close()
        cold_executor = SandboxExecutor(backend, pool_size=0, close_backend=False)
        cold, plain = await bench_cold_and_docker_run(cold_executor, spec, client, image, args.n)
        await cold_executor.close()

        docker_p50 = statistics.median(plain)
        print(f"image {image}, {args.n} samples each, {os.cpu_count()} CPUs")
        print(f"warm pool  p50 {ms(statistics.median(warm))}  p95 {ms(percentile(warm, 95))}")
        print(f"cold path  p50 {ms(statistics.median(cold))}  p95 {ms(percentile(cold, 95))}")
        print(f"docker run p50 {ms(docker_p50)}  p95 {ms(percentile(plain, 95))}")
        print(
            f"ratios: warm/docker-run {statistics.median(warm) / docker_p50:.3f} (goal <= 0.1), "
            f"cold/docker-run {statistics.median(cold) / docker_p50:.3f} (goal <= 1.1)"
        )
        if args.sustained:
            await bench_sustained(backend, spec, args.sustained)
        if args.flood:
            flood_executor = SandboxExecutor(backend, pool_size=0, close_backend=False)
            await bench_flood(flood_executor, spec)
            await flood_executor.close()
    finally:
        await backend.close()
        client.close()
        shutil.rmtree(workspace, ignore_errors=True)
        shutil.rmtree(staged, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
