"""`tooljail call --anthropic` against a real daemon: assistant message in, user message out."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from anthropic.types import Message, MessageParam, TextBlock, ToolUseBlock, Usage
from pydantic import TypeAdapter

from daemon.client.anthropic_json import call_json
from tests.integration.harness import RunningDaemon
from tests.unit.test_anthropic_json import assert_valid_user_message

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def assistant_turn(*blocks: TextBlock | ToolUseBlock) -> Message:
    return Message(
        id="msg_test",
        type="message",
        role="assistant",
        model="claude-test",
        content=list(blocks),
        stop_reason="tool_use",
        stop_sequence=None,
        usage=Usage(input_tokens=1, output_tokens=1),
    )


def use(tool_use_id: str, name: str, **tool_input: Any) -> ToolUseBlock:
    return ToolUseBlock(type="tool_use", id=tool_use_id, name=name, input=tool_input)


def text(block: dict[str, Any]) -> str:
    return "".join(part["text"] for part in block["content"] if part["type"] == "text")


def test_assistant_message_in_user_message_out(host_daemon: RunningDaemon, workdir: Path) -> None:
    (workdir / "a.txt").write_text("alpha\nbeta\n")
    turn = assistant_turn(
        TextBlock(type="text", text="I will read two files and list a folder."),
        use("toolu_01", "Read", file_path=str(workdir / "a.txt")),
        use("toolu_02", "Read", file_path="/etc/passwd"),
        use("toolu_03", "LS", path=str(workdir)),
        use("toolu_04", "Nope"),
    )
    output = call_json(turn.model_dump_json(), host_daemon.target)
    assert output.code == 0, output.stderr
    message = json.loads(output.stdout)

    blocks = assert_valid_user_message(message)
    assert [b["tool_use_id"] for b in blocks] == ["toolu_01", "toolu_02", "toolu_03", "toolu_04"]
    assert blocks[0]["is_error"] is False and "     1\talpha" in text(blocks[0])
    assert blocks[1]["is_error"] is True and "denied" in text(blocks[1])
    assert "root:" not in text(blocks[1])
    assert blocks[2]["is_error"] is False and "a.txt" in text(blocks[2])
    assert blocks[3]["is_error"] is True and "Unknown tool 'Nope'" in text(blocks[3])

    # Ready to send back: the conversation with our message appended validates as API input.
    conversation = [
        {"role": "user", "content": "Look at the files."},
        {"role": "assistant", "content": [b.model_dump() for b in turn.content]},
        message,
    ]
    TypeAdapter(list[MessageParam]).validate_python(conversation)


def test_one_tool_use_block(host_daemon: RunningDaemon, workdir: Path) -> None:
    block = use("toolu_solo", "Glob", pattern="*.md", path=str(workdir))
    (workdir / "readme.md").write_text("# hi\n")
    output = call_json(block.model_dump_json(), host_daemon.target)
    assert output.code == 0, output.stderr
    (result,) = assert_valid_user_message(json.loads(output.stdout))
    assert result["tool_use_id"] == "toolu_solo"
    assert "readme.md" in text(result)


def test_unreachable_daemon_exits_1_and_prints_nothing(short_tmp: Path) -> None:
    block = use("toolu_x", "LS", path="/tmp").model_dump_json()
    output = call_json(block, f"unix://{short_tmp / 'nobody.sock'}", timeout=10)
    assert output.code == 1
    assert output.stdout == ""
    assert "UNAVAILABLE" in output.stderr and "tooljail serve" in output.stderr


# --- the same through the command line (the flag is wired in daemon/cli.py) -------------------


def run_cli(*args: str, stdin: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "daemon.cli", *args],
        input=stdin, capture_output=True, text=True, timeout=60, check=False, cwd=REPO,
    )  # fmt: skip


@pytest.fixture(scope="module")
def anthropic_flag() -> None:
    usage = run_cli("call", "--help", stdin="")
    if "--anthropic" not in usage.stdout:
        pytest.skip("`tooljail call --anthropic` is not wired into daemon/cli.py yet")


@pytest.mark.usefixtures("anthropic_flag")
def test_command_line_round_trip(host_daemon: RunningDaemon, workdir: Path) -> None:
    (workdir / "b.txt").write_text("gamma\n")
    turn = assistant_turn(
        use("toolu_b", "Read", file_path=str(workdir / "b.txt")),
        use("toolu_c", "Read", file_path="/etc/shadow"),
    )
    done = run_cli(
        "call", "--anthropic", "--target", host_daemon.target, stdin=turn.model_dump_json()
    )
    assert done.returncode == 0, done.stderr
    blocks = assert_valid_user_message(json.loads(done.stdout))
    assert [b["tool_use_id"] for b in blocks] == ["toolu_b", "toolu_c"]
    assert "     1\tgamma" in text(blocks[0]) and blocks[1]["is_error"] is True


@pytest.mark.usefixtures("anthropic_flag")
def test_command_line_bad_stdin_exits_2(host_daemon: RunningDaemon) -> None:
    done = run_cli("call", "--anthropic", "--target", host_daemon.target, stdin='{"role": "user"}')
    assert done.returncode == 2
    assert done.stdout == ""
    assert "tool_use blocks come in an 'assistant' message" in done.stderr
