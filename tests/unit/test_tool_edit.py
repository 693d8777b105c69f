"""Edit: the order of its checks, its error texts, line endings, and the snippet it shows."""

from __future__ import annotations

import threading
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from daemon.tools.contract import CallContext
from daemon.tools.files import edit as edit_module
from daemon.tools.files.edit import EditTool
from daemon.tools.files.edits import Applied, EditSpec, apply_edit
from daemon.tools.read import MAX_FILE_BYTES
from sandbox.backend import WriteFileRequest
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


async def edit(
    ctx: CallContext, path: Path, old: str, new: str, **more: object
) -> tuple[bool, str]:
    raw = {"file_path": str(path), "old_string": old, "new_string": new, **more}
    output = await run_tool(EditTool(), raw, ctx)
    return output.is_error, text_of(output)


async def read_written(ctx: CallContext, path: Path, content: str) -> None:
    path.write_text(content)
    await read_file(ctx, path)


async def test_unique_string_is_replaced_and_a_numbered_snippet_shown(
    ctx: CallContext, workspace: Path
) -> None:
    target = workspace / "app.py"
    await read_written(ctx, target, "".join(f"line {n}\n" for n in range(1, 11)))
    is_error, text = await edit(ctx, target, "line 5\n", "line five\nline 5b\n")
    assert not is_error, text
    assert target.read_text().splitlines()[4:6] == ["line five", "line 5b"]
    assert text.startswith(f"The file {target} has been updated. Here is the result of running")
    snippet = text.split("\n")[1:]
    assert snippet[0] == "     1\tline 1"
    assert "     5\tline five" in snippet
    assert "     6\tline 5b" in snippet
    assert snippet[-1] == "    10\tline 9"


async def test_identical_strings_are_refused_first(ctx: CallContext, workspace: Path) -> None:
    # Even for a file that does not exist: this check comes before any other.
    is_error, text = await edit(ctx, workspace / "missing.py", "same", "same")
    assert is_error
    assert text.startswith("old_string and new_string are identical")
    assert fake(ctx).calls == []


async def test_empty_old_string_creates_a_missing_file(ctx: CallContext, workspace: Path) -> None:
    target = workspace / "new" / "file.txt"
    is_error, text = await edit(ctx, target, "", "hello\n")
    assert not is_error, text
    assert text == f"File created successfully at: {target}"
    assert target.read_text() == "hello\n"
    request = fake(ctx).requests[-1]
    assert isinstance(request, WriteFileRequest) and request.expected_sha256 is None


async def test_empty_old_string_on_a_file_with_content_is_refused_before_read_state(
    ctx: CallContext, workspace: Path
) -> None:
    target = workspace / "kept.txt"
    target.write_text("content\n")  # never Read: the empty-old_string error still comes first
    is_error, text = await edit(ctx, target, "", "replacement")
    assert is_error
    assert text.startswith("old_string is empty but the file already has content.")
    assert "use the Write tool" in text
    assert target.read_text() == "content\n"


async def test_empty_old_string_fills_an_empty_file_that_was_read(
    ctx: CallContext, workspace: Path
) -> None:
    target = workspace / "empty.txt"
    await read_written(ctx, target, "")
    is_error, text = await edit(ctx, target, "", "filled\n")
    assert not is_error, text
    assert target.read_text() == "filled\n"


async def test_edit_without_read_is_refused_before_not_found(
    ctx: CallContext, workspace: Path
) -> None:
    target = workspace / "a.txt"
    target.write_text("alpha\n")
    is_error, text = await edit(ctx, target, "not there", "x")
    assert is_error
    assert text == (
        f"{target} exists but has not been read in this session. Use the Read tool on it first, "
        "then retry the Edit."
    )


async def test_stale_file_is_refused(ctx: CallContext, workspace: Path) -> None:
    target = workspace / "a.txt"
    await read_written(ctx, target, "alpha\n")
    target.write_text("alpha changed elsewhere\n")
    is_error, text = await edit(ctx, target, "alpha", "beta")
    assert is_error
    assert text == (
        f"{target} has been modified since it was last read (by the user, a command or another "
        "tool). Read it again, then retry the Edit."
    )
    assert target.read_text() == "alpha changed elsewhere\n"


async def test_not_found_explains_how_to_match(ctx: CallContext, workspace: Path) -> None:
    target = workspace / "a.py"
    await read_written(ctx, target, "def f():\n    return 1\n")
    is_error, text = await edit(ctx, target, "def f():\n  return 1", "def f():\n  return 2")
    assert is_error
    assert text.startswith("old_string was not found in the file.")
    assert "including whitespace, indentation and line breaks" in text
    assert "(a right-aligned 6-column number and a TAB) is not part of the file" in text
    assert target.read_text() == "def f():\n    return 1\n"
    assert fake(ctx).calls == []


async def test_multiple_matches_need_more_context_or_replace_all(
    ctx: CallContext, workspace: Path
) -> None:
    target = workspace / "a.py"
    await read_written(ctx, target, "x = 0\nx = 0\n")
    is_error, text = await edit(ctx, target, "x = 0", "x = 1")
    assert is_error
    assert text.startswith("old_string was found 2 times in the file, but replace_all is false.")
    assert "set replace_all to true to replace all 2 occurrences" in text
    assert target.read_text() == "x = 0\nx = 0\n"


async def test_replace_all_replaces_every_occurrence(ctx: CallContext, workspace: Path) -> None:
    target = workspace / "a.py"
    await read_written(ctx, target, "old()\nkeep()\nold()\nold()\n")
    is_error, text = await edit(ctx, target, "old()", "new()", replace_all="true")
    assert not is_error, text
    assert target.read_text() == "new()\nkeep()\nnew()\nnew()\n"
    assert "all 3 occurrences were replaced" in text


async def test_crlf_line_endings_are_preserved(ctx: CallContext, workspace: Path) -> None:
    target = workspace / "win.txt"
    target.write_bytes(b"first\r\nsecond\r\nthird\r\n")
    await read_file(ctx, target)
    is_error, text = await edit(ctx, target, "first\nsecond\n", "one\ntwo\nthree-ish\n")
    assert not is_error, text
    assert target.read_bytes() == b"one\r\ntwo\r\nthree-ish\r\nthird\r\n"
    assert "\r" not in text


async def test_consecutive_edits_need_no_new_read(ctx: CallContext, workspace: Path) -> None:
    target = workspace / "a.txt"
    await read_written(ctx, target, "a\n")
    assert (await edit(ctx, target, "a", "b"))[0] is False
    is_error, text = await edit(ctx, target, "b", "c")
    assert not is_error, text
    assert target.read_text() == "c\n"


async def test_missing_file_with_old_string_is_refused(ctx: CallContext, workspace: Path) -> None:
    target = workspace / "nope.txt"
    is_error, text = await edit(ctx, target, "a", "b")
    assert is_error
    assert text.startswith(f"{target} does not exist.")
    assert not target.exists()


async def test_binary_files_are_refused(ctx: CallContext, workspace: Path) -> None:
    target = workspace / "blob.bin"
    target.write_bytes(b"\x00\x01abc")
    is_error, text = await edit(ctx, target, "abc", "xyz")
    assert is_error
    assert "binary" in text
    assert target.read_bytes() == b"\x00\x01abc"


async def test_edit_that_empties_the_file_says_so(ctx: CallContext, workspace: Path) -> None:
    target = workspace / "a.txt"
    await read_written(ctx, target, "only line\n")
    is_error, text = await edit(ctx, target, "only line\n", "")
    assert not is_error, text
    assert text == f"The file {target} has been updated; it is now empty."
    assert target.read_bytes() == b""


async def test_extra_fields_are_rejected(ctx: CallContext, workspace: Path) -> None:
    target = workspace / "a.txt"
    await read_written(ctx, target, "a\n")
    is_error, text = await edit(ctx, target, "a", "b", expected_replacements=1)
    assert is_error
    assert "`expected_replacements`: unexpected field" in text
    assert target.read_text() == "a\n"


def test_schema_defaults_replace_all_to_false() -> None:
    schema = EditTool().input_schema()
    assert schema["additionalProperties"] is False
    assert sorted(schema["required"]) == ["file_path", "new_string", "old_string"]
    assert schema["properties"]["replace_all"]["default"] is False


async def edit_summary(ctx: CallContext, path: Path, old: str, new: str, **more: object) -> str:
    raw = {"file_path": str(path), "old_string": old, "new_string": new, **more}
    _, summary = await run_summarized(EditTool(), raw, ctx)
    return summary


async def test_summary_of_edits_and_of_a_creation(ctx: CallContext, workspace: Path) -> None:
    target = workspace / "a.py"
    await read_written(ctx, target, "x = 1\ny = x\nz = x\n")
    assert await edit_summary(ctx, target, "y = x", "y = 2") == "Edited a.py (1 replacement)"
    # "x = 1\ny = 2\nz = x\n" now: two x left
    assert await edit_summary(ctx, target, "x", "w", replace_all=True) == (
        "Edited a.py (2 replacements)"
    )
    created = workspace / "pkg" / "new.py"
    assert await edit_summary(ctx, created, "", "a = 1\nb = 2\n") == "Created pkg/new.py (2 lines)"


async def test_summary_of_a_failed_edit_says_why_in_a_few_words(
    ctx: CallContext, workspace: Path
) -> None:
    target = workspace / "a.py"
    await read_written(ctx, target, "x = 1\nx = 1\n")
    assert await edit_summary(ctx, target, "nope", "yes") == "Edit failed: old_string not found"
    assert await edit_summary(ctx, target, "x = 1", "x = 2") == (
        "Edit failed: old_string found 2 times (replace_all is false)"
    )
    assert await edit_summary(ctx, target, "", "all new") == "Edit failed: file not empty"
    unread = workspace / "unread.py"
    unread.write_text("a\n")
    assert await edit_summary(ctx, unread, "a", "b") == "Edit failed: file not Read first"
    assert await edit_summary(ctx, workspace / "missing.py", "a", "b") == (
        "Edit failed: no such file or directory"
    )


async def test_replace_all_over_the_size_limit_is_refused_before_the_result_is_built(
    ctx: CallContext, workspace: Path
) -> None:
    target = workspace / "many.txt"
    await read_written(ctx, target, "x" * 40_000)
    tracemalloc.start()
    try:
        is_error, text = await edit(ctx, target, "x", "y" * 1_000, replace_all=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert is_error
    assert text == (
        f"Replacing all 40000 occurrences would make the file 40000000 bytes, more than the "
        f"{MAX_FILE_BYTES} bytes the file tools handle; nothing was changed. Replace fewer "
        "occurrences per call, or make a change this large with Bash."
    )
    assert peak < 4 << 20, f"{peak} bytes held: the 40 MB result was built"
    assert fake(ctx).calls == []
    assert target.read_text() == "x" * 40_000


async def test_the_replacement_is_worked_out_off_the_event_loop(
    ctx: CallContext, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[threading.Thread] = []

    def spy(text: str, spec: EditSpec, *more: Any, **named: Any) -> Applied:
        threads.append(threading.current_thread())
        return apply_edit(text, spec, *more, **named)

    monkeypatch.setattr(edit_module, "apply_edit", spy)
    target = workspace / "names.py"
    await read_written(ctx, target, "old = 1\nprint(old)\n")
    is_error, text = await edit(ctx, target, "old", "new", replace_all=True)
    assert not is_error, text
    assert target.read_text() == "new = 1\nprint(new)\n"
    assert threads and threading.current_thread() not in threads
