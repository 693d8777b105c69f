"""Anthropic JSON in, Anthropic JSON out: `tooljail call --anthropic`.

A caller that already holds the Messages API's JSON pipes the assistant message (or its tool_use
blocks) in and gets back the one user message to send next: a tool_result block for every
tool_use, in the order the tool_use blocks came. The conversions are pure functions; `call_json`
at the bottom is the command's only input/output, one ExecuteBatch over gRPC.

Exit codes: 0 when every tool_use got its result (an `is_error` result is an answer for the model,
not a failure of the command), 1 when the daemon did not answer for every call, 2 for bad input.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import grpc
from google.protobuf import json_format
from tooljail.wire import pb, pb_grpc

from daemon.client.connection import Connection
from daemon.errors import RequestError
from daemon.models import TextContent, ToolResult, ToolUse

__all__ = [
    "CallOutput",
    "call_json",
    "tool_uses_from",
    "tool_uses_from_json",
    "tool_uses_to_proto",
    "user_message",
]

_SHAPES = "an assistant message, a list of tool_use blocks, or one tool_use block"
_PROG = "tooljail call --anthropic"


def tool_uses_from_json(text: str) -> list[ToolUse]:
    """The tool_use blocks of a JSON document (see `tool_uses_from`).

    Raises:
        RequestError: the text is not JSON, or not one of the accepted shapes.
    """
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RequestError(f"stdin is not valid JSON ({exc}); send {_SHAPES}") from None
    return tool_uses_from(document)


def tool_uses_from(document: object) -> list[ToolUse]:
    """The tool_use blocks of an assistant message, a list of content blocks, or one block.

    Other blocks of the message (text, thinking, server tool blocks) are skipped: only tool_use
    blocks are ours to answer. A block without a `type` counts as a tool_use, as in `tooljail call`.

    Raises:
        RequestError: the document has no tool_use block, or a malformed one (the message names
            which block and which field).
    """
    blocks, where = _blocks_of(document)
    tool_uses: list[ToolUse] = []
    for index, block in enumerate(blocks):
        at = f"{where}[{index}]"
        if not isinstance(block, dict):
            raise RequestError(
                f"{at} is a {type(block).__name__}; every content block is an object"
            )
        if block.get("type", "tool_use") == "tool_use":
            tool_uses.append(_tool_use(block, at))
    if not tool_uses:
        raise RequestError(
            f"no tool_use block in {where}; nothing to run. A message whose stop_reason is not "
            "`tool_use` needs no tool results."
        )
    seen: set[str] = set()
    for tool_use in tool_uses:
        if tool_use.id in seen:
            raise RequestError(
                f"tool_use id {tool_use.id!r} appears twice; each tool_use needs its own id"
            )
        seen.add(tool_use.id)
    return tool_uses


def _blocks_of(document: object) -> tuple[list[object], str]:
    """The content blocks to look at, and how to name their list in messages."""
    if isinstance(document, list):
        if any(isinstance(item, dict) and "role" in item for item in document):
            raise RequestError(
                "stdin holds a list of messages; send only the last assistant message"
            )
        return document, "the list"
    if not isinstance(document, dict):
        raise RequestError(f"stdin holds a JSON {type(document).__name__}; send {_SHAPES}")
    if "role" not in document:
        return [document], "the block"
    if document["role"] != "assistant":
        raise RequestError(
            f"the message's role is {document['role']!r}; tool_use blocks come in an "
            "'assistant' message"
        )
    content = document.get("content")
    if isinstance(content, str):
        return [], "the message (its content is plain text)"
    if not isinstance(content, list):
        raise RequestError("the assistant message has no `content` list of blocks")
    return content, "content"


def _tool_use(block: dict[str, Any], at: str) -> ToolUse:
    tool_use_id, name = block.get("id"), block.get("name")
    if not isinstance(tool_use_id, str) or not tool_use_id:
        raise RequestError(f"{at}: tool_use `id` must be a non-empty string (the model's id)")
    if not isinstance(name, str) or not name:
        raise RequestError(f"{at}: tool_use `name` must be a non-empty string (the tool to call)")
    tool_input = block.get("input", {})
    if not isinstance(tool_input, dict):
        raise RequestError(
            f"{at}: tool_use `input` must be a JSON object, not {type(tool_input).__name__}"
        )
    return ToolUse(id=tool_use_id, name=name, input=tool_input)


def tool_uses_to_proto(tool_uses: Iterable[ToolUse]) -> list[pb.ToolUse]:
    """Tool uses as the wire messages of an ExecuteBatchRequest."""
    return [
        json_format.ParseDict({"id": t.id, "name": t.name, "input": t.input}, pb.ToolUse())
        for t in tool_uses
    ]


def user_message(
    tool_uses: Sequence[ToolUse],
    responses: Iterable[pb.ExecuteResponse],
    missing_reason: str = "",
) -> dict[str, Any]:
    """The user message answering `tool_uses`: one tool_result each, in the tool_uses' order.

    Each result is the daemon's own `tool_result_json`, unchanged. A tool_use without a response
    (the stream broke off) gets an error result built from `missing_reason`, so the message is
    still one the Messages API accepts: every tool_use answered exactly once.
    """
    by_id: dict[str, dict[str, Any]] = {}
    for response in responses:
        block = json.loads(response.tool_result_json)
        by_id.setdefault(block["tool_use_id"], block)
    content = [
        by_id[t.id] if t.id in by_id else _missing(t.id, missing_reason).to_anthropic()
        for t in tool_uses
    ]
    return {"role": "user", "content": content}


def _missing(tool_use_id: str, reason: str) -> ToolResult:
    text = (
        f"tooljail returned no result for this call ({reason or 'the answer stream ended early'}); "
        "it may or may not have run. Check its effects before calling it again."
    )
    return ToolResult(tool_use_id=tool_use_id, content=(TextContent(text=text),), is_error=True)


class CallOutput(NamedTuple):
    """What the command prints and returns."""

    stdout: str
    stderr: str
    code: int


def call_json(
    stdin_text: str, target: str | Connection, session: str = "", timeout: float = 900.0
) -> CallOutput:
    """Run the tool_use blocks of `stdin_text` as one ExecuteBatch; answer with the user message.

    Args:
        stdin_text: An assistant message, a list of tool_use blocks, or one tool_use block (JSON).
        target: The daemon's address (`unix:///path` or `host:port`), or a Connection with
            TLS files and a token.
        session: Session id; empty for the daemon's default session.
        timeout: Seconds to wait for the whole batch.
    """
    try:
        tool_uses = tool_uses_from_json(stdin_text)
    except RequestError as exc:
        return CallOutput("", f"{_PROG}: {exc}\n", 2)
    request = pb.ExecuteBatchRequest(session_id=session, tool_uses=tool_uses_to_proto(tool_uses))
    responses: list[pb.ExecuteResponse] = []
    failure = ""
    connection = target if isinstance(target, Connection) else Connection(target)
    with connection.channel() as channel:
        stub = pb_grpc.ExecutorStub(channel)
        try:
            responses.extend(stub.ExecuteBatch(request, timeout=timeout))
        except grpc.RpcError as exc:
            failure = f"{exc.code().name}: {exc.details()}"
    if not failure:
        return CallOutput(json.dumps(user_message(tool_uses, responses)) + "\n", "", 0)
    if not responses:
        hint = " Is `tooljail serve` running there?" if "UNAVAILABLE" in failure else ""
        where = connection.target  # never the Connection itself: it holds the token
        return CallOutput("", f"{_PROG}: the daemon at {where} answered {failure}.{hint}\n", 1)
    message = user_message(tool_uses, responses, missing_reason=failure)
    note = (
        f"{_PROG}: the daemon answered {len(responses)} of {len(tool_uses)} calls, then {failure}; "
        "the others carry an error result\n"
    )
    return CallOutput(json.dumps(message) + "\n", note, 1)
