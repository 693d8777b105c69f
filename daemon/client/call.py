"""`tooljail call`: run tool_use blocks from the command line or stdin and show the results,
with live progress for a single call (running output and a spinner on a terminal, plain lines
otherwise)."""

from __future__ import annotations

import itertools
import json
import sys
import uuid
from collections.abc import Iterable
from typing import Any, TextIO

from google.protobuf import json_format
from tooljail.wire import pb, pb_grpc

from daemon.text import printable, printable_lines

_SPINNER = "|/-\\"


def tool_uses_from(name: str | None, raw_input: str | None, tool_use_id: str) -> list[pb.ToolUse]:
    """From the command line (NAME [INPUT]) or stdin (a tool_use block, or a list of them)."""
    if name:
        parsed = json.loads(raw_input) if raw_input else {}
        if not isinstance(parsed, dict):
            raise ValueError("INPUT must be a JSON object")
        blocks: list[Any] = [
            {
                "id": tool_use_id or f"toolu_cli_{uuid.uuid4().hex[:16]}",
                "name": name,
                "input": parsed,
            }
        ]
    else:
        document = json.load(sys.stdin)
        blocks = document if isinstance(document, list) else [document]
    if not blocks or not all(isinstance(b, dict) for b in blocks):
        raise ValueError("stdin must hold a tool_use object or a list of them")
    return [
        json_format.ParseDict(b, pb.ToolUse(), ignore_unknown_fields=True)
        for b in blocks
        if b.get("type", "tool_use") == "tool_use"
    ]


class ProgressView:
    """Shows progress on stderr: live on a terminal, one plain line per update otherwise."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._tty = stream.isatty()
        self._spin = itertools.cycle(_SPINNER)
        self._status_shown = False

    def show(self, progress: pb.Progress) -> None:
        """Render one update."""
        if progress.output:
            self._clear_status()
            self._stream.write(progress.output if self._tty else _prefixed(progress.output))
        status = progress.message or (
            f"scanned {progress.files_scanned} files" if progress.files_scanned else ""
        )
        if status:
            if self._tty:
                self._stream.write(f"\r{next(self._spin)} {status}\x1b[K")
                self._status_shown = True
            else:
                self._stream.write(f"progress: {status}\n")
        self._stream.flush()

    def _clear_status(self) -> None:
        if self._status_shown:
            self._stream.write("\r\x1b[K")
            self._status_shown = False

    def done(self) -> None:
        """Leave the terminal clean."""
        self._clear_status()
        self._stream.flush()


def _prefixed(output: str) -> str:
    return "".join(f"output: {line}\n" for line in output.splitlines())


def print_response(response: pb.ExecuteResponse, as_json: bool) -> None:
    """One response, as JSON or as text for people."""
    if as_json:
        print(json_format.MessageToJson(response, indent=2))
        return
    outcome = pb.Outcome.Name(response.decision.outcome)
    marker = "error" if response.result.is_error else "ok"
    summary = f" {response.summary}" if response.summary else ""
    # What the tool printed is the model's and the workspace's: the terminal shows it, never
    # acts on it (escape sequences could rewrite what a person reads above).
    print(printable(f"--- {response.result.tool_use_id} [{outcome}, {marker}]{summary}"))
    for block in response.result.content:
        if block.HasField("text"):
            print(printable_lines(block.text.text))
        else:
            print(printable(f"<image {block.image.media_type}, {len(block.image.data)} bytes>"))
    if response.decision.approval_token:
        print(f"approval token: {printable(response.decision.approval_token)}")


def run_calls(
    stub: pb_grpc.ExecutorStub,
    tool_uses: list[pb.ToolUse],
    *,
    session: str,
    timeout: float,
    as_json: bool,
    approval_token: str = "",
) -> int:
    """Run the calls; exit code 1 when any result is an error."""
    responses: Iterable[pb.ExecuteResponse]
    if len(tool_uses) == 1:
        responses = [_stream_one(stub, tool_uses[0], session, timeout, as_json, approval_token)]
    else:
        responses = stub.ExecuteBatch(
            pb.ExecuteBatchRequest(session_id=session, tool_uses=tool_uses), timeout=timeout
        )
    failed = False
    for response in responses:
        failed = failed or response.result.is_error
        print_response(response, as_json)
    return 1 if failed else 0


def _stream_one(
    stub: pb_grpc.ExecutorStub,
    tool_use: pb.ToolUse,
    session: str,
    timeout: float,
    as_json: bool,
    approval_token: str,
) -> pb.ExecuteResponse:
    view = ProgressView(sys.stderr)
    request = pb.ExecuteRequest(
        session_id=session, tool_use=tool_use, approval_token=approval_token
    )
    final = pb.ExecuteResponse()
    try:
        for event in stub.ExecuteStream(request, timeout=timeout):
            if event.HasField("progress"):
                if not as_json:
                    view.show(event.progress)
            else:
                final = event.response
    finally:
        view.done()
    return final
