"""Targeted bad input: hand-encoded protobuf (invalid UTF-8, corrupt wire format, nesting past
the decoder's limit, NaN), 10 MB inputs, a 17 MB message, raw bytes and malformed HTTP/2 frames on
the socket, values too long for the kernel or for a status message. Every answer must be precise,
and the daemon must serve on."""

from __future__ import annotations

import asyncio
import contextlib
import math
import socket
import time
import uuid
from pathlib import Path
from typing import Any

import grpc
import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon.server.convert import MAX_ID_CHARS
from tests.integration.harness import RunningDaemon
from tests.reliability.answers import (
    LARGE_BODY_WARNING,
    problem_with,
    send,
    send_raw,
    still_serves,
    use,
)
from tests.reliability.conftest import Record
from tests.reliability.support import text_of

pytestmark = pytest.mark.integration


# --- targeted bad input ------------------------------------------------------------------------


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _deep_struct(levels: int) -> bytes:
    """A Struct nested `levels` JSON levels deep: {"k": {"k": ... "leaf"}}, hand-encoded."""
    value = _field(3, b"leaf")  # Value.string_value
    for _ in range(levels):
        entry = _field(1, b"k") + _field(2, value)  # map entry: key, Value
        value = _field(5, _field(1, entry))  # Value.struct_value(Struct.fields)
    return _field(1, _field(1, b"k") + _field(2, value))


def _readuse(tool_use_id: bytes, extra_input: bytes = b"") -> bytes:
    """ExecuteRequest{tool_use: {id, name: "Read", input}} as bytes."""
    return _field(2, _field(1, tool_use_id) + _field(2, b"Read") + _field(3, extra_input))


def _nan_request() -> bytes:
    tool = pb.ToolUse(id="toolu_nan", name="Read")
    tool.input.fields["offset"].number_value = math.nan
    return pb.ExecuteRequest(tool_use=tool).SerializeToString()


def _infinity_request() -> bytes:
    tool = pb.ToolUse(id="toolu_inf", name="Read")
    tool.input.fields["limit"].number_value = math.inf
    return pb.ExecuteRequest(tool_use=tool).SerializeToString()


@pytest.mark.parametrize("name", ["Glob", "Grep", "LS"])
@pytest.mark.parametrize("shape", ["long component", "long path"])
def test_a_too_long_path_is_an_input_error_not_a_crash(
    rel_host: RunningDaemon, host_dir: Path, name: str, shape: str, record: Record
) -> None:
    path = f"{host_dir}/{'n' * 300}" if shape == "long component" else f"{host_dir}/{'d/' * 2100}"
    tool_input: dict[str, Any] = {"path": path}
    if name != "LS":
        tool_input["pattern"] = "*" if name == "Glob" else "needle"
    request = pb.ExecuteRequest(tool_use=use(name, tool_input))
    outcome = send(rel_host, request)
    problem = problem_with(request, outcome)
    record("paths too long for the kernel", 1, 0 if problem else 1)
    assert not problem, problem
    assert isinstance(outcome, pb.ExecuteResponse) and outcome.result.is_error
    assert "too long" in text_of(outcome), text_of(outcome)


@pytest.mark.parametrize(
    "where", ["reused tool_use id", "long tool_use id", "long tool name", "unknown session id"]
)
def test_long_values_in_error_statuses_are_shortened(
    rel_host: RunningDaemon, host_dir: Path, where: str, record: Record
) -> None:
    long_value = "v" * 40_000 + uuid.uuid4().hex
    first = pb.ExecuteRequest(tool_use=use("LS", {"path": str(host_dir)}))
    if where == "reused tool_use id":
        longest_id = long_value[-MAX_ID_CHARS:]  # the longest taken (attacker round 143)
        first.tool_use.id = longest_id
        assert isinstance(send(rel_host, first), pb.ExecuteResponse)
        request = pb.ExecuteRequest(tool_use=use("LS", {"path": f"{host_dir}/"}))
        request.tool_use.id = longest_id
    elif where == "long tool_use id":
        request = first
        request.tool_use.id = long_value
    elif where == "long tool name":
        request = first
        request.tool_use.name = long_value
    else:
        request = first
        request.session_id = long_value
    outcome = send(rel_host, request)
    problem = problem_with(request, outcome)
    record("long values quoted in error statuses", 1, 0 if problem else 1)
    assert not problem, problem
    assert isinstance(outcome, grpc.RpcError)
    expected = {
        "reused tool_use id": grpc.StatusCode.INVALID_ARGUMENT,
        "long tool_use id": grpc.StatusCode.INVALID_ARGUMENT,
        "long tool name": grpc.StatusCode.INVALID_ARGUMENT,
        "unknown session id": grpc.StatusCode.NOT_FOUND,
    }
    assert outcome.code() == expected[where]


RAW_CASES = [
    pytest.param(b"", id="empty message"),
    pytest.param(_field(2, b""), id="empty tool_use"),
    pytest.param(_readuse(b"toolu_ok", _deep_struct(25)), id="nesting 25 levels"),
    pytest.param(_field(1, b"ses\x00sion") + _readuse(b"toolu_nul"), id="NUL in session id"),
    pytest.param(_field(1, b"\xff\xfe") + _readuse(b"toolu_bad"), id="invalid UTF-8 session"),
    pytest.param(_readuse(b"toolu_\xc3\x28"), id="invalid UTF-8 id"),
    pytest.param(_readuse(b"toolu_x", _field(1, _field(1, b"\xed\xa0\x80"))),
                 id="surrogate in an input key"),
    pytest.param(_readuse(b"toolu_deep", _deep_struct(40)), id="nesting 40 levels"),
    pytest.param(b"\x0a\xff\xff\xff\xff\x0f", id="corrupt length"),
    pytest.param(b"\x12\x05\x0a\x03", id="truncated message"),
    pytest.param(_nan_request(), id="NaN number"),
    pytest.param(_infinity_request(), id="infinite number"),
]  # fmt: skip


@pytest.mark.parametrize("payload", RAW_CASES)
def test_hand_encoded_requests_get_a_precise_status_or_result(
    rel_host: RunningDaemon, host_dir: Path, payload: bytes, record: Record
) -> None:
    outcome = send_raw(rel_host, payload)
    problem = problem_with(payload, outcome)
    record("hand-encoded ExecuteRequest", 1, 0 if problem else 1)
    assert still_serves(rel_host, host_dir)
    assert not problem, problem


_METHODS = [
    (service.full_name, method)
    for service in pb.DESCRIPTOR.services_by_name.values()
    for method in service.methods
]


@pytest.mark.parametrize(
    ("service", "method"), _METHODS, ids=[f"{s.rsplit('.', 1)[-1]}.{m.name}" for s, m in _METHODS]
)
def test_every_method_answers_undecodable_bytes_with_invalid_argument(
    rel_host: RunningDaemon, host_dir: Path, service: str, method: Any, record: Record
) -> None:
    path = f"/{service}/{method.name}"
    corrupt = b"\x0a\xff\xff\xff\xff\x0f"
    if method.server_streaming:
        stream: Any = rel_host.channel.unary_stream(path, request_serializer=None)
        with pytest.raises(grpc.RpcError) as raised:
            list(stream(corrupt, timeout=30))
        error = raised.value
    else:
        unary: Any = rel_host.channel.unary_unary(path, request_serializer=None)
        with pytest.raises(grpc.RpcError) as raised:
            unary(corrupt, timeout=30)
        error = raised.value
    precise = error.code() == grpc.StatusCode.INVALID_ARGUMENT
    record("undecodable bytes, every method", 1, int(precise))
    assert precise, (error.code(), error.details())
    assert f"not a valid {method.input_type.full_name} message" in error.details()
    assert still_serves(rel_host, host_dir)


@pytest.mark.filterwarnings(LARGE_BODY_WARNING)
@pytest.mark.parametrize(
    ("name", "field"),
    [
        ("Read", "file_path"), ("Write", "content"), ("Bash", "command"), ("Edit", "old_string"),
        ("LS", "path"), ("ToolSearch", "query"),
        ("Grep", "pattern"),
        ("Glob", "pattern"),
    ],
)  # fmt: skip
def test_ten_megabyte_inputs_are_answered(
    rel_host: RunningDaemon, host_dir: Path, name: str, field: str, record: Record
) -> None:
    huge = "y" * (10 << 20)
    tool_input: dict[str, Any] = {field: huge}
    if field != "file_path" and name in ("Write", "Edit"):
        tool_input["file_path"] = str(host_dir / "ten.txt")
    if name == "Edit":
        tool_input["new_string"] = "z"
    request = pb.ExecuteRequest(tool_use=pb.ToolUse(id=f"toolu_10mb_{name}", name=name))
    request.tool_use.input.update(tool_input)
    started = time.monotonic()
    outcome = send(rel_host, request)
    elapsed = time.monotonic() - started
    problem = problem_with(request, outcome)
    record("10 MB inputs", 1, 0 if problem else 1)
    assert not problem, problem
    assert elapsed < 60
    if isinstance(outcome, pb.ExecuteResponse):
        assert len(text_of(outcome)) <= 100_000, "the result ignored its budget"
    assert still_serves(rel_host, host_dir)


def test_a_17_megabyte_message_is_refused_and_the_daemon_serves_on(
    rel_host: RunningDaemon, host_dir: Path, record: Record
) -> None:
    request = pb.ExecuteRequest(tool_use=pb.ToolUse(id="toolu_17mb", name="Write"))
    request.tool_use.input.update({"file_path": str(host_dir / "x"), "content": "z" * (17 << 20)})
    outcome = send(rel_host, request)
    refused = (
        isinstance(outcome, grpc.RpcError) and outcome.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    )
    record("17 MB message", 1, int(refused))
    assert refused, outcome
    assert still_serves(rel_host, host_dir)


GARBAGE = [
    pytest.param(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", id="HTTP/1.1 request"),
    pytest.param(bytes(range(256)) * 64, id="binary garbage"),
    pytest.param(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", id="preface only"),
    # The preface, then a HEADERS frame header promising 16 KB of which 3 bytes arrive.
    pytest.param(
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
        + b"\x00\x40\x00\x01\x05\x00\x00\x00\x01abc",
        id="truncated HEADERS frame",
    ),
    # A SETTINGS frame whose length is not a multiple of 6 (a protocol error), then a DATA frame
    # on a stream that was never opened.
    pytest.param(
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x05\x04\x00\x00\x00\x00\x00" + b"12345"
        + b"\x00\x00\x04\x00\x00\x00\x00\x00\x07" + b"data",
        id="malformed frames",
    ),
]  # fmt: skip


@pytest.mark.parametrize("payload", GARBAGE)
def test_raw_bytes_on_the_socket_do_not_hurt_the_daemon(
    rel_host: RunningDaemon, host_dir: Path, payload: bytes, record: Record
) -> None:
    path = rel_host.target.removeprefix("unix:")
    for hang_up_early in (False, True):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw:
            raw.settimeout(5)
            raw.connect(path)
            raw.sendall(payload)
            if not hang_up_early:
                # Whatever the server answers (a GOAWAY, nothing), it must not wait forever.
                with contextlib.suppress(TimeoutError):
                    raw.recv(65536)
    serves = still_serves(rel_host, host_dir)
    record("raw bytes on the socket", 2, 2 if serves else 0)
    assert serves


def _loop_stall_while(rel_host: RunningDaemon, pending: Any) -> float:
    """The longest time between two no-ops the daemon's event loop ran, 50 ms apart, until
    `pending` was answered: every other call waits about that long. (Measured from one to the
    next: a thread holding the GIL stops this one anywhere, even outside a timed section.)"""
    worst = 0.0
    last = time.monotonic()
    while not pending.done():
        asyncio.run_coroutine_threadsafe(asyncio.sleep(0), rel_host.loop).result(timeout=120)
        now = time.monotonic()
        worst, last = max(worst, now - last), now
        time.sleep(0.05)
    return worst


def test_a_long_glob_pattern_does_not_stall_other_calls(rel_host: RunningDaemon) -> None:
    slow = rel_host.stub.Execute.future(
        pb.ExecuteRequest(tool_use=use("Glob", {"pattern": "g" * 800_000})), timeout=120
    )
    worst = _loop_stall_while(rel_host, slow)
    slow.result()
    assert worst < 1.0, f"the daemon stopped serving for {worst:.1f} s behind a long Glob pattern"


@pytest.mark.filterwarnings(LARGE_BODY_WARNING)
def test_an_input_of_three_million_values_does_not_stall_other_calls(
    rel_host: RunningDaemon, host_dir: Path
) -> None:
    # Each `true` in a list costs 4 bytes on the wire and a Python object once decoded.
    tool_input = {
        "file_path": str(host_dir / "many.txt"),
        "content": "",
        "flags": [True] * 3_000_000,
    }
    slow = rel_host.stub.Execute.future(
        pb.ExecuteRequest(tool_use=use("Write", tool_input)), timeout=120
    )
    worst = _loop_stall_while(rel_host, slow)
    with pytest.raises(grpc.RpcError) as raised:
        slow.result()
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "tool_use.input holds more than 100000 values" in raised.value.details()
    assert worst < 1.0, f"the daemon stopped serving for {worst:.1f} s behind 3 million values"


def test_a_bash_line_that_is_slow_to_parse_does_not_stall_other_calls(
    rel_host: RunningDaemon,
) -> None:
    """tree-sitter's error recovery holds the GIL and grows with the square of the length: one
    32 KB line of `a|` froze the daemon for 5 s (attacker round 55)."""
    slow = rel_host.stub.Execute.future(
        pb.ExecuteRequest(tool_use=use("Bash", {"command": "a|" * 16_383})), timeout=120
    )
    worst = _loop_stall_while(rel_host, slow)
    answer = slow.result()
    assert answer.decision.outcome == pb.ASK, text_of(answer)
    assert "could not be fully parsed" in text_of(answer)
    assert worst < 1.0, f"the daemon stopped serving for {worst:.1f} s behind one Bash line"
