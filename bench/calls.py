"""What every client scenario shares: channels, requests with unique ids, timing a call, telling
an error from an answer, and reading CPU counters."""

from __future__ import annotations

import itertools
import resource
import time
import uuid
from typing import Any

import grpc

from bench.processes import cpu_seconds
from daemon._generated.tooljail.v1 import executor_pb2 as pb

Spec = dict[str, Any]
_ids = itertools.count()
#: Ids must be unique across client processes too: the daemon remembers answers by tool_use id.
_ID_PREFIX = f"toolu_bench_{uuid.uuid4().hex[:10]}"
_MAX_ERROR_SAMPLES = 5


def open_channel(target: str) -> grpc.aio.Channel:
    """A channel with a connection of its own (a local subchannel pool: channels to the same
    target would otherwise share one connection, unlike separate clients)."""
    return grpc.aio.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)])


def execute_request(
    name: str, tool_input: dict[str, Any], session_id: str = ""
) -> pb.ExecuteRequest:
    """An ExecuteRequest with a tool_use id never used before."""
    request = pb.ExecuteRequest(session_id=session_id)
    request.tool_use.id = f"{_ID_PREFIX}_{next(_ids):08d}"
    request.tool_use.name = name
    request.tool_use.input.update(tool_input)
    return request


def text_of(response: pb.ExecuteResponse) -> str:
    """All text of the tool_result."""
    return "".join(b.text.text for b in response.result.content if b.HasField("text"))


def problem_of(response: pb.ExecuteResponse, expect: str | None = None) -> str | None:
    """Why a response counts as an error, or None."""
    text = text_of(response)
    if response.report.replayed:
        return "replayed: the daemon answered from its memory of an earlier call with this id"
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


async def timed_execute(
    stub: Any, request: pb.ExecuteRequest, tally: Tally, timeout_s: float, expect: str | None = None
) -> tuple[float, pb.ExecuteResponse | None]:
    started = time.perf_counter()
    try:
        response: pb.ExecuteResponse = await stub.Execute(request, timeout=timeout_s)
    except grpc.aio.AioRpcError as exc:
        tally.add(f"{exc.code().name}: {exc.details()}")
        return time.perf_counter() - started, None
    elapsed = time.perf_counter() - started
    if problem := problem_of(response, expect):
        tally.add(problem)
    return elapsed, response


def cpu(pid: int) -> tuple[float, float]:
    """(own, children) CPU seconds of a process."""
    return cpu_seconds(pid)


def client_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
