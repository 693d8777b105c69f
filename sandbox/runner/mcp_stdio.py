"""MCP exchanges with a server over its stdio, driven by the runner (standard library only).

An operator's MCP server that speaks stdio runs inside the sandbox: the runner starts it, says
`initialize` and `notifications/initialized`, then asks (`tools/list`, every page, or
`tools/call`) and hands each answer back to the daemon as a result: once for a server started per
call, once per call for a server that lives for its session. Messages are JSON-RPC 2.0, one per
line. Requests the server makes of its client
(sampling, roots, elicitation) are refused, `ping` is answered, progress of a call is handed on
(at most ten times a second, for the person watching), a tools/list_changed makes the runner
list the tools again after the call (handed back beside its answer), other notifications are
ignored; a
line that is not JSON-RPC, an answer larger than the limit or no answer by the deadline ends the
exchange with an error that says so.
"""

from __future__ import annotations

import math
import os
import select
import time

TYPE_CHECKING = False  # what typing.TYPE_CHECKING is at run time, without its 10 ms import
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

try:  # in the container: this file's folder (read-only) is on sys.path
    import wire  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # on the host, as part of the sandbox package (tests)
    from sandbox.runner import wire

PROTOCOL_VERSION = "2025-06-18"
MAX_PAGES = 20
PROGRESS_INTERVAL_S = 0.1
_READ = 1 << 16
_NOT_OFFERED = "tooljail's sandbox client does not offer this"


class McpStdioError(Exception):
    """The exchange failed; the message says how (for the model and the operator)."""


class McpRefused(McpStdioError):
    """The server answered with a JSON-RPC error: it is still there and in step."""


class Conversation:
    """JSON-RPC over a child's stdin (`write_fd`) and stdout (`read_fd`)."""

    def __init__(
        self,
        write_fd: int,
        read_fd: int,
        deadline: float,
        max_bytes: int,
        on_stderr: tuple[int, Callable[[bytes], None]] | None = None,
    ) -> None:
        self._write_fd = write_fd
        self._read_fd = read_fd
        self._deadline = deadline
        self._max = max_bytes
        self._stderr = on_stderr
        self._buffer = bytearray()
        self.tools_changed = False
        """The server said its tools changed (notifications/tools/list_changed)."""
        self.on_progress: Callable[[str], None] | None = None
        """Gets a line per progress notification of a call (rate-limited)."""
        self._progress_at = 0.0

    def set_deadline(self, deadline: float) -> None:
        """When the next exchange must be over (a session's server has one per call)."""
        self._deadline = deadline

    def _remaining(self) -> float:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise McpStdioError("the MCP server did not answer in time")
        return left

    def _wait(self, fd: int, *, write: bool) -> None:
        """Until `fd` is ready; meanwhile the server's stderr is drained (a full pipe would
        stall it)."""
        while True:
            readers = [] if write else [fd]
            if self._stderr is not None:
                readers.append(self._stderr[0])
            ready_r, ready_w, _ = select.select(
                readers, [fd] if write else [], [], self._remaining()
            )
            if self._stderr is not None and self._stderr[0] in ready_r:
                data = os.read(self._stderr[0], _READ)
                if data:
                    self._stderr[1](data)
                else:
                    self._stderr = None
            if fd in ready_r or fd in ready_w:
                return

    def send(self, message: dict[str, Any]) -> None:
        data = memoryview((wire.dumps(message, ascii_only=True) + "\n").encode())
        while data:
            self._wait(self._write_fd, write=True)
            try:
                written = os.write(self._write_fd, data)
            except BrokenPipeError as exc:
                raise McpStdioError("the MCP server closed its input (it exited?)") from exc
            data = data[written:]

    def _line(self) -> bytes:
        while b"\n" not in self._buffer:
            if len(self._buffer) > self._max:
                raise McpStdioError(f"the MCP server sent a message over {self._max} bytes")
            self._wait(self._read_fd, write=False)
            data = os.read(self._read_fd, _READ)
            if not data:
                raise McpStdioError("the MCP server ended its output before answering (exited?)")
            self._buffer += data
        line, _, rest = bytes(self._buffer).partition(b"\n")
        self._buffer = bytearray(rest)
        return line

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Send a request and wait for its answer's result (McpStdioError for an error)."""
        # Not guessable: a server cannot send, during one call, the answer to the next one.
        ident = os.urandom(12).hex()  # secrets would import hashlib: 5 ms a container
        self.send({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
        while True:
            line = self._line().strip()
            if not line:
                continue
            try:
                message = wire.loads(line.decode("utf-8"))
            except (ValueError, RecursionError) as exc:  # RecursionError: nested too deep
                shown = line[:120].decode("utf-8", "replace")
                raise McpStdioError(
                    f"the MCP server printed a line that is not JSON: {shown!r}"
                ) from exc
            if not isinstance(message, dict):
                raise McpStdioError("the MCP server sent a JSON value that is not a message")
            if "method" in message:
                self._answer(message)
                continue
            if message.get("id") != ident:
                continue  # an answer to nothing we asked: ignored
            if "error" in message:
                error = message["error"]
                text = error.get("message", error) if isinstance(error, dict) else error
                raise McpRefused(f"the MCP server refused {method}: {text}")
            result = message.get("result")
            if not isinstance(result, dict):
                raise McpStdioError(f"the MCP server answered {method} without a result object")
            return result

    def _answer(self, message: dict[str, Any]) -> None:
        """A request or notification from the server."""
        if "id" not in message:
            if message.get("method") == "notifications/progress":
                self._progress(message.get("params"))
            elif message.get("method") == "notifications/tools/list_changed":
                self.tools_changed = True
            return  # other notifications are ignored
        if message.get("method") == "ping":
            self.send({"jsonrpc": "2.0", "id": message["id"], "result": {}})
            return
        self.send(
            {
                "jsonrpc": "2.0",
                "id": message["id"],
                "error": {"code": -32601, "message": _NOT_OFFERED},
            }
        )

    def _progress(self, params: object) -> None:
        now = time.monotonic()
        if self.on_progress is None or not isinstance(params, dict) or now < self._progress_at:
            return
        self._progress_at = now + PROGRESS_INTERVAL_S
        done, total, said = (
            _number(params.get("progress")),
            _number(params.get("total")),
            params.get("message"),
        )
        if done is None:
            return
        amount = f"{done:g}/{total:g}" if total is not None else f"{done:g}"
        text = f"{said[:200]}: {amount}" if isinstance(said, str) and said else amount
        self.on_progress(f"{text}\n")


def _number(value: object) -> float | None:
    """A finite JSON number as a float (a huge integer or a bool is none)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def initialize(conversation: Conversation) -> None:
    """The handshake every session with a server starts with."""
    conversation.request(
        "initialize",
        {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "tooljail-sandbox", "version": "1"},
        },
    )
    conversation.send({"jsonrpc": "2.0", "method": "notifications/initialized"})


def ask(conversation: Conversation, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """`tools/list` (all pages, as one {"tools": [...]}) or `tools/call`, once initialized."""
    if method == "tools/call":
        # A token asks the server for progress notifications of this call.
        meta = {"progressToken": os.urandom(8).hex()}
        return conversation.request("tools/call", {**params, "_meta": meta})
    if method != "tools/list":
        raise McpRefused(f"unknown method {method}")
    tools: list[Any] = []
    cursor = None
    for _ in range(MAX_PAGES):
        page = conversation.request("tools/list", {"cursor": cursor} if cursor else {})
        listed = page.get("tools")
        if isinstance(listed, list):
            tools += listed
        cursor = page.get("nextCursor")
        if not isinstance(cursor, str) or not cursor:
            break
    return {"tools": tools}


def exchange(conversation: Conversation, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """Initialize, then ask once (a server started for one call)."""
    initialize(conversation)
    return ask(conversation, method, params)
