"""A gRPC client at the HTTP/2 frame level, for what a well-behaved client library never sends: a
message announced and left unfinished, connections that never call anything.

Only what the tests need: plain TCP, HPACK literals without Huffman coding on the way out, and
frames read back by type and flags (the server's header blocks are not decoded).
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = 0, 1, 3, 4, 6, 7, 8
END_STREAM, ACK, END_HEADERS = 0x1, 0x1, 0x4
SETTINGS_MAX_CONCURRENT_STREAMS = 0x3
SETTINGS_INITIAL_WINDOW_SIZE = 0x4


@dataclass(frozen=True)
class Frame:
    kind: int
    flags: int
    stream: int
    payload: bytes


def _integer(value: int, prefix_bits: int) -> bytes:
    """An HPACK integer with an N-bit prefix (RFC 7541, 5.1), the first byte's flags all 0."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([value])
    out = bytearray([limit])
    value -= limit
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    out.append(value)
    return bytes(out)


def _literal(name: str, value: str) -> bytes:
    """A header as a literal without indexing, with a new name, neither Huffman coded."""
    encoded_name, encoded_value = name.encode(), value.encode()
    return (
        b"\x00"
        + _integer(len(encoded_name), 7)
        + encoded_name
        + _integer(len(encoded_value), 7)
        + encoded_value
    )


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    head = struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream)
    return head + payload


def request_headers(path: str, token: str | None = None) -> bytes:
    """The header block of a gRPC call of `path`, with a bearer token when one is given."""
    fields = [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", path),
        (":authority", "localhost"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ]
    if token is not None:
        fields.append(("authorization", f"Bearer {token}"))
    return b"".join(_literal(name, value) for name, value in fields)


def message_prefix(length: int) -> bytes:
    """gRPC's length prefix of an uncompressed message of `length` bytes."""
    return b"\x00" + struct.pack(">I", length)


class RawConnection:
    """One HTTP/2 connection to a TCP address, its preface and SETTINGS sent."""

    def __init__(self, address: str, timeout_s: float = 30.0) -> None:
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self.sock.settimeout(timeout_s)
        self._buffer = b""
        self.sock.sendall(PREFACE + frame(SETTINGS, 0, 0))

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _read_exactly(self, count: int, deadline: float) -> bytes | None:
        while len(self._buffer) < count:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                return None
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                raise EOFError("the server closed the connection")
            self._buffer += chunk
        out, self._buffer = self._buffer[:count], self._buffer[count:]
        return out

    def next_frame(self, timeout_s: float) -> Frame | None:
        """The next frame, None when none came within `timeout_s`; EOFError once the server
        closed the connection. The server's SETTINGS and PINGs are acknowledged."""
        deadline = time.monotonic() + timeout_s
        head = self._read_exactly(9, deadline)
        if head is None:
            return None
        length = int.from_bytes(head[:3], "big")
        payload = self._read_exactly(length, deadline + 30) if length else b""
        got = Frame(head[3], head[4], int.from_bytes(head[5:9], "big") & 0x7FFFFFFF, payload or b"")
        if got.kind == SETTINGS and not got.flags & ACK:
            self.send(frame(SETTINGS, ACK, 0))
        elif got.kind == PING and not got.flags & ACK:
            self.send(frame(PING, ACK, 0, got.payload))
        return got

    def settings(self, timeout_s: float = 30.0) -> dict[int, int]:
        """The server's first SETTINGS frame, by identifier."""
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            got = self.next_frame(left)
            if got is not None and got.kind == SETTINGS and not got.flags & ACK:
                pairs = got.payload
                return {
                    int.from_bytes(pairs[i : i + 2], "big"): int.from_bytes(pairs[i + 2 : i + 6])
                    for i in range(0, len(pairs), 6)
                }
        raise TimeoutError("no SETTINGS from the server")

    def frames_of(self, stream: int, timeout_s: float) -> list[Frame]:
        """The frames of `stream` until it ends (a header block or DATA with END_STREAM, or a
        RST_STREAM); those received by then when it did not end within `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        seen: list[Frame] = []
        while (left := deadline - time.monotonic()) > 0:
            got = self.next_frame(left)
            if got is None or got.stream != stream:
                continue
            seen.append(got)
            if got.kind == RST_STREAM or (got.kind in (HEADERS, DATA) and got.flags & END_STREAM):
                break
        return seen


def ended(frames: list[Frame]) -> bool:
    """Whether the server ended the stream with its status (trailers), not a reset."""
    return bool(frames) and frames[-1].kind == HEADERS and bool(frames[-1].flags & END_STREAM)
