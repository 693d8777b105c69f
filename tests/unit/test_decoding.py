"""Request decoding at the gRPC edge: a method's converter runs only once the servicer has
admitted the caller; on the event loop for a small request, in a worker thread for a large one (a
Struct of a million values takes a second to convert), only a few at a time. What a converter
refuses is INVALID_ARGUMENT either way."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon._generated.tooljail.v1 import executor_pb2_grpc as pb_grpc
from daemon.calls.pipeline import CallRequest
from daemon.errors import RequestError, Unauthenticated
from daemon.server import convert
from daemon.server.decoding import LARGE_DECODES_AT_ONCE, LARGE_REQUEST_BYTES, Decoded, add_service

EXECUTOR = pb.DESCRIPTOR.services_by_name["Executor"]
LARGE = "x" * LARGE_REQUEST_BYTES


class Echo:
    """Answers Execute with the converted request's tool_use id; when `refused` says so, refuses
    the caller before it asks for the request, as the real servicer admits callers first."""

    def __init__(self, refused: Callable[[], bool] = lambda: False) -> None:
        self.admitted = 0
        self._refused = refused

    async def Execute(self, request: Decoded[CallRequest], context: Any) -> pb.ExecuteResponse:
        if self._refused():
            raise Unauthenticated("not you")
        self.admitted += 1
        call = await request.get()
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


@asynccontextmanager
async def serving(
    tmp_path: Path, servicer: Echo, converter: Callable[[pb.ExecuteRequest], CallRequest]
) -> AsyncIterator[grpc.aio.Channel]:
    server = grpc.aio.server()
    add_service(server, EXECUTOR, servicer, {"Execute": converter})
    target = f"unix://{tmp_path / 'd.sock'}"
    server.add_insecure_port(target)
    await server.start()
    try:
        async with grpc.aio.insecure_channel(target) as channel:
            yield channel
    finally:
        await server.stop(None)


def spy(threads: list[int]) -> Callable[[pb.ExecuteRequest], CallRequest]:
    def converting(message: pb.ExecuteRequest) -> CallRequest:
        threads.append(threading.get_ident())
        return convert.call_request_from_proto(message)

    return converting


async def test_only_a_large_request_is_converted_in_a_worker_thread(tmp_path: Path) -> None:
    threads: list[int] = []
    servicer = Echo()
    async with serving(tmp_path, servicer, spy(threads)) as channel:
        stub = pb_grpc.ExecutorStub(channel)
        small = await stub.Execute(_request("toolu_small", "x"))
        large = await stub.Execute(_request("toolu_large", LARGE))
        refusals = []
        for text in ("x", LARGE):
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await stub.Execute(_request("", text))
            refusals.append((raised.value.code(), raised.value.details()))
    loop_thread = threading.get_ident()
    assert (small.result.tool_use_id, large.result.tool_use_id) == ("toolu_small", "toolu_large")
    assert threads[0] == loop_thread and threads[1] != loop_thread
    expected = (grpc.StatusCode.INVALID_ARGUMENT, "tool_use.id is empty: every tool_use needs "
                "the id the model gave it")  # fmt: skip
    assert refusals == [expected, expected]
    assert servicer.admitted == 4, "a refused request must still reach the servicer's admission"


@pytest.mark.parametrize("text", ["x", LARGE], ids=["small", "large"])
async def test_the_request_of_a_refused_caller_is_never_converted(
    tmp_path: Path, text: str
) -> None:
    threads: list[int] = []
    async with serving(tmp_path, Echo(refused=lambda: True), spy(threads)) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await pb_grpc.ExecutorStub(channel).Execute(_request("toolu_refused", text))
    assert raised.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert threads == []


async def test_a_large_request_that_is_not_protobuf_is_invalid_argument(tmp_path: Path) -> None:
    async with serving(tmp_path, Echo(), spy([])) as channel:
        raw = channel.unary_unary("/tooljail.v1.Executor/Execute", request_serializer=None)
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await raw(b"\x0a\xff\xff\xff\xff\x0f" + b"x" * LARGE_REQUEST_BYTES)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "not a valid tooljail.v1.ExecuteRequest message" in raised.value.details()


async def test_large_requests_are_converted_a_few_at_a_time(tmp_path: Path) -> None:
    inside = 0
    most = 0
    lock = threading.Lock()
    release = threading.Event()

    def slow(message: pb.ExecuteRequest) -> CallRequest:
        nonlocal inside, most
        with lock:
            inside += 1
            most = max(most, inside)
        release.wait(30)
        with lock:
            inside -= 1
        return convert.call_request_from_proto(message)

    async with serving(tmp_path, Echo(), slow) as channel:
        stub = pb_grpc.ExecutorStub(channel)
        calls = [
            asyncio.ensure_future(stub.Execute(_request(f"toolu_{i}", LARGE)))
            for i in range(LARGE_DECODES_AT_ONCE + 2)
        ]
        while most < LARGE_DECODES_AT_ONCE:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)  # time for a conversion past the limit to start, if it could
        release.set()
        answers = await asyncio.gather(*calls)
    assert most == LARGE_DECODES_AT_ONCE
    assert [a.result.tool_use_id for a in answers] == [f"toolu_{i}" for i in range(len(calls))]


async def test_a_converter_for_a_method_the_service_lacks_is_refused() -> None:
    server = grpc.aio.server()
    with pytest.raises(TypeError, match="has no methods"):
        add_service(server, EXECUTOR, Echo(), {"Exceute": convert.call_request_from_proto})


def test_an_input_of_too_many_values_is_refused_whatever_its_size_on_the_wire() -> None:
    """`{}` costs 2 bytes on the wire and about 70 once decoded, held while its turn lasts."""
    request = _request("toolu_many", "x")
    request.tool_use.input.update({"flags": [{}] * convert.MAX_INPUT_VALUES})
    with pytest.raises(RequestError, match="holds more than 100000 values"):
        convert.call_request_from_proto(request)
    fewer = _request("toolu_fewer", "x")
    fewer.tool_use.input.update({"flags": [{}] * (convert.MAX_INPUT_VALUES - 10)})
    assert len(convert.call_request_from_proto(fewer).tool_use.input["flags"]) > 0


def test_too_many_values_are_refused_before_they_are_converted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Attacker round 57: the count ran on the converted dict, so a 15 MB input of `{}` took
    hundreds of MB before it was refused."""
    converted: list[int] = []
    original = convert.json_format.MessageToDict
    monkeypatch.setattr(
        convert.json_format,
        "MessageToDict",
        lambda message, **kw: converted.append(1) or original(message, **kw),
    )
    request = _request("toolu_many", "x")
    request.tool_use.input.update({"flags": [{}] * (convert.MAX_INPUT_VALUES * 3)})
    with pytest.raises(RequestError, match="holds more than 100000 values"):
        convert.call_request_from_proto(request)
    assert converted == []


def test_a_batch_holds_at_most_twice_one_inputs_values() -> None:
    """Attacker round 57: 40 tool_uses of 99,990 values each passed the per-input cap."""
    batch = pb.ExecuteBatchRequest()
    for i in range(3):
        use = batch.tool_uses.add(id=f"toolu_{i}", name="x")
        use.input.update({"flags": [{}] * (convert.MAX_INPUT_VALUES - 10)})
    with pytest.raises(RequestError, match="the batch's tool inputs hold more than"):
        convert.batch_from_proto(batch)
    batch.tool_uses.pop()
    assert len(convert.batch_from_proto(batch)) == 2


class Flood(Echo):
    """ExecuteStream answers with large events for as long as the client takes them."""

    def __init__(self) -> None:
        super().__init__()
        self.closed = asyncio.Event()

    async def ExecuteStream(self, request: Any, context: Any) -> AsyncIterator[pb.ExecuteEvent]:
        event = pb.ExecuteEvent(progress=pb.Progress(tool_use_id="t", output="x" * 200_000))
        try:
            while True:
                yield event
        finally:
            self.closed.set()


async def test_a_client_going_away_while_a_message_waits_ends_the_stream_quietly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Round 162: a client cancelling while its stream's next message waited for room made
    grpc's core fail the write, which was logged as an error with its traceback each time."""
    servicer = Flood()
    small_window = [("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 1024)]
    target = f"unix://{tmp_path / 'd.sock'}"
    server = grpc.aio.server()
    add_service(server, EXECUTOR, servicer, {"ExecuteStream": convert.call_request_from_proto})
    server.add_insecure_port(target)
    await server.start()
    try:
        with caplog.at_level(logging.ERROR):
            for _ in range(3):
                servicer.closed.clear()
                async with grpc.aio.insecure_channel(target, options=small_window) as channel:
                    call = pb_grpc.ExecutorStub(channel).ExecuteStream(_request("toolu_flood", "x"))
                    await call.read()
                    await asyncio.sleep(0.2)  # the daemon's next write now waits for room
                    call.cancel()
                    async with asyncio.timeout(30):
                        await servicer.closed.wait()
    finally:
        await server.stop(None)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
