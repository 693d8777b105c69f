"""Framing between daemon and runner, and Docker's multiplexed attach stream (no Docker)."""

from __future__ import annotations

import itertools
import os
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandbox.protocol import (
    ATTACHED_BYTES,
    MAX_PROGRESS_BYTES,
    PROTOCOL_VERSION,
    STDERR,
    STDOUT,
    AttachDemuxer,
    FrameDecoder,
    ProtocolError,
    encode_frame,
    progress_output,
)
from sandbox.runner import runner as runner_module


def docker_frame(stream: int, payload: bytes) -> bytes:
    return struct.pack(">BxxxI", stream, len(payload)) + payload


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    edges = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


@given(
    frames=st.lists(
        st.tuples(st.sampled_from([STDOUT, STDERR]), st.binary(max_size=300)), max_size=8
    ),
    cuts=st.lists(st.integers(min_value=0, max_value=5000), max_size=20),
)
def test_demuxer_recovers_each_stream_whatever_the_read_sizes(
    frames: list[tuple[int, bytes]], cuts: list[int]
) -> None:
    wire = b"".join(docker_frame(stream, payload) for stream, payload in frames)
    demux = AttachDemuxer()
    got = {STDOUT: b"", STDERR: b""}
    for piece in split_at(wire, cuts):
        for stream, payload in demux.feed(piece):
            got[stream] += payload
    assert got[STDOUT] == b"".join(p for s, p in frames if s == STDOUT)
    assert got[STDERR] == b"".join(p for s, p in frames if s == STDERR)
    assert demux.idle


def test_demuxer_hands_out_a_large_frame_before_it_is_complete() -> None:
    demux = AttachDemuxer()
    frame = docker_frame(STDOUT, b"a" * 1000)
    assert demux.feed(frame[:508]) == [(STDOUT, b"a" * 500)]
    assert not demux.idle


def test_demuxer_rejects_an_unknown_stream() -> None:
    with pytest.raises(ProtocolError, match="unknown attach stream id 7"):
        AttachDemuxer().feed(docker_frame(7, b"x"))


@given(
    messages=st.lists(
        st.dictionaries(st.text(max_size=5), st.text(max_size=50), max_size=3).map(
            lambda d: {**d, "type": "result"}
        ),
        max_size=5,
    ),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=20),
)
def test_frames_round_trip_across_any_split(
    messages: list[dict[str, str]], cuts: list[int]
) -> None:
    wire = b"".join(encode_frame(m) for m in messages)
    decoder = FrameDecoder(1 << 20)
    got: list[dict[str, object]] = []
    for piece in split_at(wire, cuts):
        got += decoder.feed(piece)
    assert got == messages
    assert decoder.pending_bytes == 0


def test_decoder_refuses_an_oversized_length_before_buffering_it() -> None:
    decoder = FrameDecoder(100)
    with pytest.raises(ProtocolError, match="exceeds the 100-byte limit"):
        decoder.feed(struct.pack(">I", 101))


@pytest.mark.parametrize("body", [b"\xff\xfe", b"[1]", b'{"no_type": 1}', b"nope"])
def test_decoder_refuses_what_is_not_a_typed_json_object(body: bytes) -> None:
    with pytest.raises(ProtocolError):
        FrameDecoder(100).feed(struct.pack(">I", len(body)) + body)


def test_runner_and_host_agree_on_the_wire_format() -> None:
    assert runner_module.PROTOCOL_VERSION == PROTOCOL_VERSION
    assert runner_module.ATTACHED_BYTES == ATTACHED_BYTES
    read_end, write_end = os.pipe()
    try:
        message = {"type": "result", "output": "é\x00\n" * 3, "exit_code": 0}
        runner_module.write_message(write_end, message)
        os.close(write_end)
        data = os.read(read_end, 1 << 16)
    finally:
        os.close(read_end)
    assert FrameDecoder(1 << 16).feed(data) == [message]
    assert data == encode_frame(message)


def test_runner_and_host_agree_on_the_progress_chunk_limit() -> None:
    assert runner_module.MAX_PROGRESS_BYTES == MAX_PROGRESS_BYTES


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ({"type": "progress", "output": "line\n"}, "line\n"),
        ({"type": "progress", "output": "x" * (MAX_PROGRESS_BYTES + 10)}, "x" * MAX_PROGRESS_BYTES),
        ({"type": "progress", "output": ""}, None),
        ({"type": "progress", "output": ["a"]}, None),
        ({"type": "progress"}, None),
        ({"type": "result", "output": "x"}, None),
    ],
)
def test_progress_output_takes_only_well_formed_bounded_chunks(
    message: dict[str, object], expected: str | None
) -> None:
    assert progress_output(message) == expected


def test_names_that_are_not_utf8_cross_both_ways_as_the_same_bytes() -> None:
    """A path Python decoded with surrogateescape reaches the other side as the same bytes."""
    name = os.fsdecode(b"/ws/bad\xff\xfename")
    request = {"type": "write", "path": name, "content": "héllo"}
    read, write = os.pipe()
    try:
        os.write(write, encode_frame(request))
        received = runner_module.read_request(read, 5)
    finally:
        os.close(read)
        os.close(write)
    assert received is not None and os.fsencode(received["path"]) == b"/ws/bad\xff\xfename"
    assert received["content"] == "héllo"
    read, write = os.pipe()
    try:
        runner_module.write_message(write, {"type": "result", "final_cwd": name})
        (answer,) = FrameDecoder(1 << 20).feed(os.read(read, 1 << 16))
    finally:
        os.close(read)
        os.close(write)
    assert os.fsencode(answer["final_cwd"]) == b"/ws/bad\xff\xfename"
