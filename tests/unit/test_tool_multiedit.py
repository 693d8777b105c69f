"""MultiEdit: edits apply in order and all together, or not at all."""

from __future__ import annotations

import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from daemon.tools.contract import CallContext
from daemon.tools.files.multiedit import MultiEditTool
from daemon.tools.read import MAX_FILE_BYTES
from tests.unit.fake_sandbox import (
    FakeSandbox,
    make_context,
    read_file,
    run_summarized,
    run_tool,
    text_of,
)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = (tmp_path / "ws").resolve()
    root.mkdir()
    return root


@pytest.fixture
def ctx(workspace: Path) -> CallContext:
    return make_context(workspace)


def fake(ctx: CallContext) -> FakeSandbox:
    assert isinstance(ctx.sandbox, FakeSandbox)
    return ctx.sandbox


async def multiedit(ctx: CallContext, path: Path, edits: list[dict[str, Any]]) -> tuple[bool, str]:
    output = await run_tool(MultiEditTool(), {"file_path": str(path), "edits": edits}, ctx)
    return output.is_error, text_of(output)


async def test_edits_apply_in_order_on_the_previous_result(
    ctx: CallContext, workspace: Path
) -> None:
    target = workspace / "conf.ini"
    target.write_text("name = a\nsize = 1\nsize = 1\n")
    await read_file(ctx, target)
    is_error, text = await multiedit(
        ctx,
        target,
        [
            {"old_string": "name = a", "new_string": "name = b"},
            {"old_string": "name = b\n", "new_string": "name = c\nmode = x\n"},
            {"old_string": "size = 1", "new_string": "size = 2", "replace_all": True},
        ],
    )
    assert not is_error, text
    assert target.read_text() == "name = c\nmode = x\nsize = 2\nsize = 2\n"
    assert text == f"Applied 3 edits to {target} (4 replacements in total)."
    assert len(fake(ctx).calls) == 1


async def test_a_failing_second_edit_leaves_the_file_unchanged(
    ctx: CallContext, workspace: Path
) -> None:
    target = workspace / "a.py"
    target.write_text("one\ntwo\nthree\n")
    await read_file(ctx, target)
    is_error, text = await multiedit(
        ctx,
        target,
        [
            {"old_string": "one", "new_string": "ONE"},
            {"old_string": "zwei", "new_string": "TWO"},
            {"old_string": "three", "new_string": "THREE"},
        ],
    )
    assert is_error
    assert text.startswith("Edit 2 of 3 failed: old_string was not found in the file.")
    assert "None of the edits were applied; the file is unchanged." in text
    assert target.read_text() == "one\ntwo\nthree\n"
    assert fake(ctx).calls == []


async def test_ambiguous_edit_is_named_with_its_count(ctx: CallContext, workspace: Path) -> None:
    target = workspace / "a.py"
    target.write_text("x\nx\n")
    await read_file(ctx, target)
    is_error, text = await multiedit(ctx, target, [{"old_string": "x", "new_string": "y"}])
    assert is_error
    assert text.startswith("Edit 1 of 1 failed: old_string was found 2 times in the file")
    assert target.read_text() == "x\nx\n"


async def test_identical_strings_are_refused_by_validation_with_the_index(
    ctx: CallContext, workspace: Path
) -> None:
    target = workspace / "a.py"
    target.write_text("a\n")
    is_error, text = await multiedit(
        ctx,
        target,
        [{"old_string": "a", "new_string": "b"}, {"old_string": "b", "new_string": "b"}],
    )
    assert is_error
    assert text.startswith("Edit 2 of 2 failed: old_string and new_string are identical")
    assert target.read_text() == "a\n"


async def test_a_new_file_is_created_from_an_empty_first_old_string(
    ctx: CallContext, workspace: Path
) -> None:
    target = workspace / "pkg" / "new.py"
    is_error, text = await multiedit(
        ctx,
        target,
        [
            {"old_string": "", "new_string": "def f():\n    return 0\n"},
            {"old_string": "return 0", "new_string": "return 42"},
        ],
    )
    assert not is_error, text
    assert text == f"File created successfully at: {target} (2 edits)."
    assert target.read_text() == "def f():\n    return 42\n"


async def test_a_missing_file_needs_an_empty_first_old_string(
    ctx: CallContext, workspace: Path
) -> None:
    target = workspace / "missing.py"
    is_error, text = await multiedit(ctx, target, [{"old_string": "a", "new_string": "b"}])
    assert is_error
    assert text.startswith(f"{target} does not exist.")
    assert not target.exists()


async def test_empty_old_string_later_on_is_refused(ctx: CallContext, workspace: Path) -> None:
    target = workspace / "a.py"
    target.write_text("a\n")
    await read_file(ctx, target)
    is_error, text = await multiedit(
        ctx,
        target,
        [{"old_string": "a", "new_string": "b"}, {"old_string": "", "new_string": "c"}],
    )
    assert is_error
    assert text.startswith("Edit 2 of 2 failed: old_string is empty but the file already has")
    assert target.read_text() == "a\n"


async def test_read_before_write_and_staleness_apply(ctx: CallContext, workspace: Path) -> None:
    target = workspace / "a.txt"
    target.write_text("a\n")
    edits = [{"old_string": "a", "new_string": "b"}]
    is_error, text = await multiedit(ctx, target, edits)
    assert is_error
    assert "has not been read in this session" in text
    assert text.endswith("then retry the MultiEdit.")
    await read_file(ctx, target)
    target.write_text("a\na\n")
    is_error, text = await multiedit(ctx, target, edits)
    assert is_error
    assert "has been modified since it was last read" in text
    assert target.read_text() == "a\na\n"


async def test_crlf_line_endings_are_preserved(ctx: CallContext, workspace: Path) -> None:
    target = workspace / "win.txt"
    target.write_bytes(b"a\r\nb\r\n")
    await read_file(ctx, target)
    is_error, text = await multiedit(
        ctx,
        target,
        [{"old_string": "a\nb", "new_string": "a\nx\nb"}, {"old_string": "b", "new_string": "c"}],
    )
    assert not is_error, text
    assert target.read_bytes() == b"a\r\nx\r\nc\r\n"


async def test_an_empty_edit_list_is_rejected(ctx: CallContext, workspace: Path) -> None:
    is_error, text = await multiedit(ctx, workspace / "a.txt", [])
    assert is_error
    assert "`edits`" in text and "at least 1" in text


async def test_extra_fields_in_an_edit_are_rejected(ctx: CallContext, workspace: Path) -> None:
    target = workspace / "a.txt"
    target.write_text("a\n")
    await read_file(ctx, target)
    is_error, text = await multiedit(
        ctx, target, [{"old_string": "a", "new_string": "b", "count": 1}]
    )
    assert is_error
    assert "`edits.0.count`: unexpected field" in text
    assert target.read_text() == "a\n"


async def multiedit_summary(ctx: CallContext, path: Path, edits: list[dict[str, Any]]) -> str:
    raw = {"file_path": str(path), "edits": edits}
    _, summary = await run_summarized(MultiEditTool(), raw, ctx)
    return summary


async def test_summary_counts_edits_and_replacements(ctx: CallContext, workspace: Path) -> None:
    target = workspace / "conf.ini"
    target.write_text("a=1\nb=1\nc=1\n")
    await read_file(ctx, target)
    edits = [
        {"old_string": "a=1", "new_string": "a=2"},
        {"old_string": "=1", "new_string": "=3", "replace_all": True},
    ]
    assert await multiedit_summary(ctx, target, edits) == (
        "Edited conf.ini (2 edits, 3 replacements)"
    )
    created = workspace / "new.txt"
    make = [{"old_string": "", "new_string": "hello\n"}]
    assert await multiedit_summary(ctx, created, make) == "Created new.txt with 1 edit"


async def test_summary_of_a_failed_multiedit_names_the_edit(
    ctx: CallContext, workspace: Path
) -> None:
    target = workspace / "conf.ini"
    target.write_text("a=1\n")
    await read_file(ctx, target)
    edits = [
        {"old_string": "a=1", "new_string": "a=2"},
        {"old_string": "zzz", "new_string": "y"},
    ]
    assert await multiedit_summary(ctx, target, edits) == (
        "MultiEdit failed: edit 2 of 2: old_string not found"
    )


async def test_an_edit_whose_result_would_exceed_the_size_limit_is_refused_by_number(
    ctx: CallContext, workspace: Path
) -> None:
    target = workspace / "many.txt"
    target.write_text("head\n" + "x" * 40_000)
    await read_file(ctx, target)
    tracemalloc.start()
    try:
        is_error, text = await multiedit(
            ctx,
            target,
            [
                {"old_string": "head", "new_string": "HEAD"},
                {"old_string": "x", "new_string": "y" * 1_000, "replace_all": True},
            ],
        )
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert is_error
    assert text.startswith(
        "Edit 2 of 2 failed: Replacing all 40000 occurrences would make the file 40000005 "
        f"bytes, more than the {MAX_FILE_BYTES} bytes the file tools handle"
    )
    assert "None of the edits were applied" in text
    assert peak < 4 << 20, f"{peak} bytes held: the 40 MB result was built"
    assert fake(ctx).calls == []
