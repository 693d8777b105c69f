"""Anthropic JSON in and out: what `tooljail call --anthropic` reads and prints (no daemon)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from anthropic.types import (
    ImageBlockParam,
    Message,
    TextBlock,
    TextBlockParam,
    ToolResultBlockParam,
    ToolUseBlock,
    Usage,
    UserMessageParam,
)
from pydantic import TypeAdapter

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon.client.anthropic_json import (
    call_json,
    tool_uses_from,
    tool_uses_from_json,
    tool_uses_to_proto,
    user_message,
)
from daemon.errors import RequestError
from daemon.models import ImageContent, TextContent, ToolResult

_RESULT_KEYS = ToolResultBlockParam.__required_keys__ | ToolResultBlockParam.__optional_keys__
_CONTENT = TypeAdapter(TextBlockParam | ImageBlockParam)


def assert_valid_user_message(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The message validates as the SDK's user message of tool_result blocks; returns the blocks."""
    assert set(message) == {"role", "content"}
    TypeAdapter(UserMessageParam).validate_python(message)
    assert message["role"] == "user" and message["content"], "one or more tool_result blocks"
    for block in message["content"]:
        TypeAdapter(ToolResultBlockParam).validate_python(block)
        assert block["type"] == "tool_result"
        assert set(block) <= _RESULT_KEYS, f"unknown keys {set(block) - _RESULT_KEYS}"
        for part in block["content"]:  # the SDK validates content lazily: walk it
            _CONTENT.validate_python(part)
    return list(message["content"])


def assistant_message(*blocks: TextBlock | ToolUseBlock) -> str:
    """An assistant message as a caller gets it from the SDK and pipes it on (JSON)."""
    message = Message(
        id="msg_01",
        type="message",
        role="assistant",
        model="claude-test",
        content=list(blocks),
        stop_reason="tool_use",
        stop_sequence=None,
        usage=Usage(input_tokens=10, output_tokens=20),
    )
    return message.model_dump_json()


def tool_use(tool_use_id: str, name: str, **tool_input: Any) -> ToolUseBlock:
    return ToolUseBlock(type="tool_use", id=tool_use_id, name=name, input=tool_input)


def response_for(result: ToolResult) -> pb.ExecuteResponse:
    """An ExecuteResponse as the daemon sends it (tool_result_json is the exact block)."""
    return pb.ExecuteResponse(
        result=pb.ToolResult(tool_use_id=result.tool_use_id, is_error=result.is_error),
        tool_result_json=json.dumps(result.to_anthropic()),
    )


def text_result(tool_use_id: str, text: str, is_error: bool = False) -> ToolResult:
    return ToolResult(tool_use_id=tool_use_id, content=(TextContent(text=text),), is_error=is_error)


# --- reading ---------------------------------------------------------------------------------


def test_whole_assistant_message_gives_its_tool_uses_in_order() -> None:
    text = assistant_message(
        TextBlock(type="text", text="Let me look."),
        tool_use("toolu_b", "Read", file_path="/ws/b.txt", limit=5),
        tool_use("toolu_a", "Bash", command="ls -la"),
    )
    uses = tool_uses_from_json(text)
    assert [(u.id, u.name) for u in uses] == [("toolu_b", "Read"), ("toolu_a", "Bash")]
    assert uses[0].input == {"file_path": "/ws/b.txt", "limit": 5}


def test_list_of_blocks_and_single_block() -> None:
    blocks = [tool_use("t1", "LS", path="/ws").model_dump(), {"type": "text", "text": "hi"}]
    assert [u.id for u in tool_uses_from(blocks)] == ["t1"]
    single = tool_use("t2", "Glob", pattern="*.py").model_dump()
    assert [(u.id, u.input) for u in tool_uses_from(single)] == [("t2", {"pattern": "*.py"})]
    untyped = {"id": "t3", "name": "LS", "input": {"path": "/ws"}}
    assert [u.name for u in tool_uses_from(untyped)] == ["LS"]


def test_input_defaults_to_an_empty_object() -> None:
    assert tool_uses_from({"type": "tool_use", "id": "t", "name": "LS"})[0].input == {}


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        ("not json", "not valid JSON"),
        ("42", "JSON int"),
        ('{"role": "user", "content": []}', "role is 'user'"),
        ('{"role": "assistant", "content": "just text"}', "no tool_use block"),
        ('{"role": "assistant"}', "no `content` list"),
        ('[{"role": "user", "content": "hi"}]', "list of messages"),
        ('[{"type": "text", "text": "only words"}]', "no tool_use block in the list"),
        ('[{"type": "tool_use", "id": "", "name": "LS", "input": {}}]', r"list\[0\].*`id`"),
        ('[{"type": "tool_use", "id": "t", "input": {}}]', "`name`"),
        (
            '{"type": "tool_use", "id": "t", "name": "LS", "input": [1]}',
            "`input` must be a JSON object",
        ),
        ('["toolu"]', r"list\[0\] is a str"),
        (
            '[{"id": "t", "name": "LS", "input": {}}, {"id": "t", "name": "Read", "input": {}}]',
            "'t' appears twice",
        ),
    ],
)
def test_bad_input_names_what_is_wrong(document: str, expected: str) -> None:
    with pytest.raises(RequestError, match=expected):
        tool_uses_from_json(document)


def test_bad_stdin_exits_2_without_calling_the_daemon() -> None:
    # The target is never dialled: the input is refused first.
    output = call_json('{"role": "user", "content": []}', "unix:///nonexistent/tooljail.sock")
    assert output.code == 2
    assert output.stdout == ""
    assert output.stderr.startswith("tooljail call --anthropic: ") and "assistant" in output.stderr


def test_tool_uses_to_proto_keeps_the_input() -> None:
    uses = tool_uses_from({"id": "t", "name": "Grep", "input": {"pattern": "x", "-i": True}})
    (message,) = tool_uses_to_proto(uses)
    assert (message.id, message.name) == ("t", "Grep")
    assert dict(message.input) == {"pattern": "x", "-i": True}


# --- writing ---------------------------------------------------------------------------------


def test_user_message_holds_the_daemons_blocks_in_tool_use_order() -> None:
    uses = tool_uses_from_json(
        assistant_message(tool_use("toolu_1", "Read", file_path="/x"), tool_use("toolu_2", "LS"))
    )
    image = ToolResult(
        tool_use_id="toolu_1",
        content=(
            TextContent(text="a picture"),
            ImageContent(media_type="image/png", data=b"\x89PNG"),
        ),
    )
    failed = text_result("toolu_2", "Exit code 2\nno such dir", is_error=True)
    # Responses arriving out of order still come out in the tool_use order.
    message = user_message(uses, [response_for(failed), response_for(image)])

    blocks = assert_valid_user_message(message)
    assert [b["tool_use_id"] for b in blocks] == ["toolu_1", "toolu_2"]
    assert blocks[0] == image.to_anthropic()
    assert blocks[0]["content"][1]["source"] == {
        "type": "base64", "media_type": "image/png", "data": "iVBORw==",
    }  # fmt: skip
    assert blocks[1] == {
        "type": "tool_result",
        "tool_use_id": "toolu_2",
        "content": [{"type": "text", "text": "Exit code 2\nno such dir"}],
        "is_error": True,
    }


def test_a_tool_use_without_response_gets_an_error_result() -> None:
    uses = tool_uses_from([{"id": "a", "name": "LS"}, {"id": "b", "name": "LS"}])
    message = user_message(uses, [response_for(text_result("a", "ok"))], "UNAVAILABLE: gone")
    blocks = assert_valid_user_message(message)
    assert [b["tool_use_id"] for b in blocks] == ["a", "b"]
    assert blocks[0]["is_error"] is False
    assert blocks[1]["is_error"] is True
    assert "UNAVAILABLE: gone" in blocks[1]["content"][0]["text"]
    assert "may or may not have run" in blocks[1]["content"][0]["text"]


def test_the_validator_catches_a_malformed_message() -> None:
    # The helper every test relies on must itself refuse what the API would refuse.
    bad = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x", "bogus": 1,
                                        "content": []}]}  # fmt: skip
    with pytest.raises(AssertionError, match="bogus"):
        assert_valid_user_message(bad)
    wrong_part = {"type": "tool_result", "tool_use_id": "x", "content": [{"type": "txt"}]}
    with pytest.raises(ValueError, match="text"):
        assert_valid_user_message({"role": "user", "content": [wrong_part]})


def test_a_failed_call_names_the_daemon_but_never_the_token(tmp_path: Path) -> None:
    from tooljail import Connection

    target = f"unix://{tmp_path}/absent.sock"
    use = {"type": "tool_use", "id": "toolu_1", "name": "LS", "input": {"path": "/"}}
    output = call_json(json.dumps(use), Connection(target, "s3cret-token"), timeout=5)
    assert output.code == 1 and target in output.stderr
    assert "s3cret-token" not in output.stderr + output.stdout
