"""The helpers behind the one-line summaries: durations, paths, quoting, failure reasons."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from daemon.errors import ToolError
from daemon.sessions.session import Session
from daemon.tools.call import ToolCall, run_call
from daemon.tools.contract import CallContext, Tool, ToolInput, ToolOutput, ToolTraits
from daemon.tools.summaries import failed, quoted, reason, seconds, shown_path, text_of
from tests.unit.fake_sandbox import make_context


@pytest.mark.parametrize(
    ("duration_ms", "text"),
    [
        (0, "0.0 s"),
        (4_200, "4.2 s"),
        (9_949, "9.9 s"),
        (9_950, "10 s"),
        (59_499, "59 s"),
        (59_600, "1 min"),
        (75_000, "1 min 15 s"),
    ],
)
def test_durations_read_naturally(duration_ms: int, text: str) -> None:
    assert seconds(duration_ms) == text


def test_paths_are_shown_relative_to_the_workspace_when_inside(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    assert shown_path(workspace / "src" / "app.py", workspace) == "src/app.py"
    assert shown_path(workspace / "src", workspace, directory=True) == "src/"
    assert shown_path(workspace, workspace, directory=True) == "./"
    assert shown_path(tmp_path / "elsewhere", workspace) == str(tmp_path / "elsewhere")


def test_quoting_keeps_the_text_exact_on_one_line() -> None:
    assert quoted("b = ") == "'b = '"
    assert quoted("a\nb\tc") == "'a\\nb\\tc'"
    assert quoted("x" * 50, 10) == "'" + "x" * 9 + "…'"


@pytest.mark.parametrize(
    ("error", "short"),
    [
        ("old_string was not found in the file. It must match exactly.", "old_string not found"),
        (
            "Edit 2 of 3 failed: old_string was not found in the file. None were applied.",
            "edit 2 of 3: old_string not found",
        ),
        ("/w/a.py exists but has not been read in this session. Use Read.", "file not Read first"),
        (
            "Could not write /w/a: the file changed since it was read; Read it again, then retry",
            ("file changed since it was Read"),
        ),
        ("The pattern is wrong. Fix it.", "The pattern is wrong"),
        (
            "ripgrep could not run the search:\nregex parse error",
            "ripgrep could not run the search",
        ),
        ("first; second", "first"),
        ("", ""),
    ],
)
def test_failure_reasons_are_the_first_sentence_shortened(error: str, short: str) -> None:
    assert reason(error) == short


def test_a_long_reason_is_cut_and_an_empty_one_said() -> None:
    assert len(reason("word " * 100)) <= 120
    assert failed("Read", ToolOutput.text("", is_error=True)) == "Read failed: no reason given"


class _Half(ToolInput):
    n: int


class _HalfTool(Tool[_Half, float]):
    """Halves n; refuses odd numbers after it started."""

    name = "Half"
    description = "halves"
    input_model = _Half
    traits = ToolTraits(sandboxed=False)

    async def call(self, args: _Half, ctx: CallContext) -> float:
        if args.n % 2:
            raise ToolError("odd")
        return args.n / 2

    def render(self, result: float) -> ToolOutput:
        return ToolOutput.text(str(result))

    def summarize(self, args: _Half, result: float | None, output: ToolOutput) -> str:
        return f"{args.n} -> {result!r}: {text_of(output)}"


async def test_summarize_gets_the_typed_result_or_none_when_the_call_failed(
    tmp_path: Path,
) -> None:
    session = Session(id="s", workspace=tmp_path)
    tool = _HalfTool()
    summaries = []
    for n in (4, 3):
        call = ToolCall.prepare(tool, {"n": n}, session, "toolu_1")
        ctx = make_context(tmp_path, session=session)
        ran = await run_call(call, dataclasses.replace(ctx, facts=call.facts))
        summaries.append(ran.summary(call))
    assert summaries == ["4 -> 2.0: 2.0", "3 -> None: odd"]
