"""Host side of the runner protocol, and of Docker's multiplexed attach stream it travels in.

Two layers, both pure (bytes in, values out) so they are tested without Docker:

* Docker's attach stream without a TTY multiplexes the container's stdout and stderr into frames:
  an 8-byte header (stream id, three zero bytes, 4-byte big-endian size), then the payload.
  `AttachDemuxer` splits it back, whatever the sizes of the reads that delivered it.
* The runner's messages on stdout: a 4-byte big-endian length, then a UTF-8 JSON object
  (`FrameDecoder`); requests go the other way in the same format (`encode_frame`). The runner
  (`sandbox/runner/runner.py`) cannot import this package and carries its own copy of these few
  lines; `PROTOCOL_VERSION` must match its own. A request's header may announce raw bytes
  that follow it (`ATTACHED_BYTES`: a Write's content as UTF-8, never escaped as JSON).

Message types from the runner: any number of `{"type": "progress", "output": "<chunk>"}` while a
Bash command runs (at most about 10 per second, each chunk at most `MAX_PROGRESS_BYTES` of UTF-8),
then exactly one `{"type": "result", ...}`. Progress is for people watching; the result alone is
authoritative, so a host that ignores progress loses nothing.
"""

from __future__ import annotations

import json
import struct
from typing import Any

PROTOCOL_VERSION = 2
_LENGTH = struct.Struct(">I")
ATTACHED_BYTES = "attached_bytes"
"""The request header's count of the raw bytes right after it (the runner's own copy matches)."""
_DOCKER_HEADER = struct.Struct(">BxxxI")

STDOUT = 1
STDERR = 2

#: Largest output chunk of one progress message, in UTF-8 bytes (the runner's own copy must match).
MAX_PROGRESS_BYTES = 8192


class ProtocolError(Exception):
    """The container sent something that is not a valid frame or message."""


def encode_frame(message: dict[str, Any]) -> bytes:
    """A length-prefixed UTF-8 JSON frame."""
    body = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
    try:
        encoded = body.encode("utf-8")
    except UnicodeEncodeError:
        # A file name that is not UTF-8 (Python holds its bytes as lone surrogates): as JSON
        # escapes, which decode back to the same surrogates, hence the same bytes, in the runner.
        encoded = json.dumps(message, separators=(",", ":")).encode("ascii")
    return _LENGTH.pack(len(encoded)) + encoded


class AttachDemuxer:
    """Splits Docker's multiplexed attach stream into (stream id, payload) chunks.

    Payloads are handed out as they arrive, even before their frame is complete, so no frame,
    however large, is ever held in full here.
    """

    def __init__(self) -> None:
        self._header = bytearray()
        self._stream = 0
        self._left = 0

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """Consume `data`; return the payload pieces it completed, in order."""
        chunks: list[tuple[int, bytes]] = []
        view = memoryview(data)
        while view:
            if self._left == 0:
                need = _DOCKER_HEADER.size - len(self._header)
                self._header += view[:need]
                view = view[need:]
                if len(self._header) < _DOCKER_HEADER.size:
                    break
                self._stream, self._left = _DOCKER_HEADER.unpack(self._header)
                self._header.clear()
                if self._stream not in (0, STDOUT, STDERR):
                    raise ProtocolError(f"unknown attach stream id {self._stream}")
                continue
            piece = view[: self._left]
            self._left -= len(piece)
            view = view[len(piece) :]
            chunks.append((self._stream, bytes(piece)))
        return chunks

    @property
    def idle(self) -> bool:
        """True between frames (nothing half-read)."""
        return self._left == 0 and not self._header


class FrameDecoder:
    """Reassembles length-prefixed JSON messages from a byte stream.

    Args:
        max_frame_bytes: Largest acceptable message; a larger length prefix is a protocol error
            (a confused or hostile container must not make the daemon allocate without bound).
    """

    def __init__(self, max_frame_bytes: int) -> None:
        self._max = max_frame_bytes
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        """Consume `data`; return the messages it completed, in order."""
        self._buffer += data
        messages: list[dict[str, Any]] = []
        while len(self._buffer) >= _LENGTH.size:
            (length,) = _LENGTH.unpack_from(self._buffer)
            if length > self._max:
                raise ProtocolError(f"message of {length} bytes exceeds the {self._max}-byte limit")
            end = _LENGTH.size + length
            if len(self._buffer) < end:
                break
            body = bytes(self._buffer[_LENGTH.size : end])
            del self._buffer[:end]
            messages.append(_decode(body))
        return messages

    @property
    def pending_bytes(self) -> int:
        """Bytes of an incomplete message held so far."""
        return len(self._buffer)


def progress_output(message: dict[str, Any]) -> str | None:
    """The output chunk of a progress message, None when it is not a well-formed one."""
    if message.get("type") != "progress":
        return None
    output = message.get("output")
    if not isinstance(output, str) or not output:
        return None
    # A runner must keep to the limit; a confused one is cut here rather than trusted.
    return output[:MAX_PROGRESS_BYTES]


def _decode(body: bytes) -> dict[str, Any]:
    try:
        message = json.loads(body.decode("utf-8"))
    except ValueError as exc:
        raise ProtocolError(f"message is not UTF-8 JSON: {exc}") from exc
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        raise ProtocolError("message is not a JSON object with a string 'type'")
    return message
