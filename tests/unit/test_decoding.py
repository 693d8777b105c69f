"""Request decoding at the gRPC edge: a method's converter runs on the event loop for a small
request and in a worker thread for a large one (a Struct of a million values takes a second to
convert), and what it refuses is INVALID_ARGUMENT either way, raised only once the servicer asks."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon._generated.tooljail.v1 import executor_pb2_grpc as pb_grpc
from daemon.calls.pipeline import CallRequest
from daemon.server import convert
from daemon.server.decoding import LARGE_REQUEST_BYTES, Decoded, add_service

EXECUTOR = pb.DESCRIPTOR.services_by_name["Executor"]


class Echo:
    """Answers Execute with the converted request's tool_use id (after "admitting" the caller)."""

    def __init__(self) -> None:
        self.admitted = 0

    async def Execute(self, request: Decoded[CallRequest], context: Any) -> pb.ExecuteResponse:
        self.admitted += 1
        call = request.get()
        return pb.ExecuteResponse(result=pb.ToolResult(tool_use_id=call.tool_use.id))

    def __getattr__(self, name: str) -> Any:
        async def unused(request: Any, context: Any) -> AsyncIterator[Any]:
            raise NotImplementedError(name)
            yield  # pragma: no cover - makes it a generator like the streaming methods

        return unused


def _request(tool_use_id: str, text: str) -> pb.ExecuteRequest:
    request = pb.ExecuteRequest(tool_use=pb.ToolUse(id=tool_use_id, name="Write"))
    request.tool_use.input.update({"content": text})
    return request


async def test_only_a_large_request_is_converted_in_a_worker_thread(tmp_path: Path) -> None:
    threads: list[int] = []

    def converting(message: pb.ExecuteRequest) -> CallRequest:
        threads.append(threading.get_ident())
        return convert.call_request_from_proto(message)

    servicer = Echo()
    server = grpc.aio.server()
    add_service(server, EXECUTOR, servicer, {"Execute": converting})
    target = f"unix://{tmp_path / 'd.sock'}"
    server.add_insecure_port(target)
    await server.start()
    try:
        async with grpc.aio.insecure_channel(target) as channel:
            stub = pb_grpc.ExecutorStub(channel)
            small = await stub.Execute(_request("toolu_small", "x"))
            large = await stub.Execute(_request("toolu_large", "x" * LARGE_REQUEST_BYTES))
            refusals = []
            for text in ("x", "x" * LARGE_REQUEST_BYTES):
                with pytest.raises(grpc.aio.AioRpcError) as raised:
                    await stub.Execute(_request("", text))
                refusals.append((raised.value.code(), raised.value.details()))
    finally:
        await server.stop(None)
    loop_thread = threading.get_ident()
    assert (small.result.tool_use_id, large.result.tool_use_id) == ("toolu_small", "toolu_large")
    assert threads[0] == loop_thread and threads[1] != loop_thread
    expected = (grpc.StatusCode.INVALID_ARGUMENT, "tool_use.id is empty: every tool_use needs "
                "the id the model gave it")  # fmt: skip
    assert refusals == [expected, expected]
    assert servicer.admitted == 4, "a refused request must still reach the servicer's admission"


async def test_a_converter_for_a_method_the_service_lacks_is_refused() -> None:
    server = grpc.aio.server()
    with pytest.raises(TypeError, match="has no methods"):
        add_service(server, EXECUTOR, Echo(), {"Exceute": convert.call_request_from_proto})
