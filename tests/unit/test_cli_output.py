"""What `tooljail call` prints for people: a tool's output is shown, never acted on by the
terminal (it is the model's and the workspace's text)."""

from __future__ import annotations

import pytest
from tooljail.wire import pb

from daemon.client.call import print_response


def test_escape_sequences_in_a_result_are_shown_with_its_lines_and_tabs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    hostile = "     1\tok\n\x1b[2J\x1b[1;1Happroved: yes\r\x07"
    response = pb.ExecuteResponse(
        result=pb.ToolResult(
            tool_use_id="toolu_\x1b[31m1",
            content=[pb.ContentBlock(text=pb.TextBlock(text=hostile))],
        ),
        summary="ran \x1b]0;title\x07",
    )
    print_response(response, as_json=False)
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\r" not in out and "\x07" not in out
    assert "     1\tok\n\\u001b[2J\\u001b[1;1Happroved: yes\\u000d\\u0007" in out
    head = "--- toolu_\\u001b[31m1 [OUTCOME_UNSPECIFIED, ok] ran \\u001b]0;title\\u0007\n"
    assert out.startswith(head)
