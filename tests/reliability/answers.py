"""Judging the daemon's answers to bad input, and sending requests as they are or as raw bytes."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import grpc

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from tests.integration.harness import RunningDaemon
from tests.reliability.support import execute, text_of

ACCEPTED_STATUSES = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    }
)
#: What the pipeline says when a tool raised something unexpected: a crash, caught.
CRASH_MARK = "this is a tooljail bug"
EXECUTE = "/tooljail.v1.Executor/Execute"

# aiohttp warns when the daemon sends OPA a body over 1 MiB (large inputs travel in the policy
# input); in this in-process daemon pytest would turn the warning into an error, i.e. a deny.
LARGE_BODY_WARNING = "ignore:Sending a large body:ResourceWarning"


def problem_with(request: pb.ExecuteRequest | bytes, outcome: object) -> str:
    """What is wrong with an answer; empty when it is acceptable."""
    if isinstance(outcome, grpc.RpcError):
        code = outcome.code()
        if code not in ACCEPTED_STATUSES:
            return f"status {code}: {outcome.details()}"
        if not outcome.details():
            return f"status {code} without a message"
        if "metadata size exceeds" in (outcome.details() or ""):
            return (
                f"the daemon's error message was too long to reach the client: {outcome.details()}"
            )
        return ""
    assert isinstance(outcome, pb.ExecuteResponse)
    result = outcome.result
    text = text_of(outcome)
    if isinstance(request, pb.ExecuteRequest) and result.tool_use_id != request.tool_use.id:
        return "the tool_result answers another tool_use id"
    if not result.content:
        return "a tool_result without content"
    if result.is_error and not text.strip():
        return "an error without a message"
    if CRASH_MARK in text:
        return f"a tool crashed: {text[:300]}"
    block = json.loads(outcome.tool_result_json)
    if block.get("tool_use_id") != result.tool_use_id or bool(block.get("is_error")) != bool(
        result.is_error
    ):
        return "tool_result_json disagrees with the tool_result"
    return ""


def send(daemon: RunningDaemon, request: pb.ExecuteRequest) -> object:
    """The response or the RpcError."""
    try:
        return daemon.stub.Execute(request, timeout=60)
    except grpc.RpcError as exc:
        return exc


def send_raw(daemon: RunningDaemon, payload: bytes) -> object:
    """Send hand-made bytes as an ExecuteRequest: the client does no encoding at all."""
    call: Any = daemon.channel.unary_unary(
        EXECUTE, request_serializer=None, response_deserializer=pb.ExecuteResponse.FromString
    )
    try:
        return call(payload, timeout=60)
    except grpc.RpcError as exc:
        return exc


def still_serves(daemon: RunningDaemon, workspace: Path) -> bool:
    """Whether the daemon still answers a plain Read correctly."""
    probe = workspace / "probe.txt"
    probe.write_text("still here\n")
    answer = execute(daemon.stub, "Read", {"file_path": str(probe)})
    return answer.decision.outcome == pb.ALLOW and "still here" in text_of(answer)


def use(name: str, tool_input: dict[str, Any]) -> pb.ToolUse:
    use = pb.ToolUse(id=f"toolu_{name}_{time.monotonic_ns()}", name=name)
    use.input.update(tool_input)
    return use
