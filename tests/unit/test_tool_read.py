"""Read on real files: numbering, windows, refusals, confinement, the session record, the schema."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import subprocess
import threading
import tracemalloc
from collections.abc import Awaitable
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from daemon.errors import ConfinementError, ToolError, ToolInputError
from daemon.models import ImageContent, TextContent
from daemon.sessions.session import Session
from daemon.tools import read as read_module
from daemon.tools.contract import ToolOutput
from daemon.tools.read import (
    MAX_FILE_BYTES,
    MAX_LINE_CHARS,
    MAX_WHOLE_FILE_BYTES,
    ReadInput,
    ReadTool,
)
from tests.unit.conftest import CallTool, write_uncached
from tests.unit.fake_sandbox import make_context, run_summarized

TOOL = ReadTool()


def text_of(output: ToolOutput) -> str:
    assert not output.is_error
    return "".join(b.text for b in output.content if isinstance(b, TextContent))


async def read(call_tool: CallTool, path: Path | str, **extra: object) -> str:
    return text_of(await call_tool(TOOL, {"file_path": str(path), **extra}))


def cat_n(path: Path) -> list[str]:
    """Real `cat -n` output lines (its format is "%6d\\t"), endings removed."""
    out = subprocess.run(["cat", "-n", str(path)], capture_output=True, check=True, text=True)
    return out.stdout.splitlines()


async def test_numbering_matches_cat_n_for_a_window(call_tool: CallTool, workspace: Path) -> None:
    path = workspace / "f.txt"
    path.write_text("".join(f"line {i}\n" for i in range(1, 13)))
    text = await read(call_tool, path, offset=3, limit=4)
    shown, _, note = text.partition("\n\n")
    assert shown.split("\n") == cat_n(path)[2:6]
    assert shown.split("\n")[0] == "     3\tline 3"
    assert note == "(Showing lines 3-6 of 12. Call Read with offset=7 to read on.)"


async def test_whole_file_is_exactly_cat_n(call_tool: CallTool, workspace: Path) -> None:
    path = workspace / "f.py"
    path.write_text("def f():\n\treturn 1\n\n# end")
    assert await read(call_tool, path) == "\n".join(cat_n(path))


async def test_offset_zero_means_the_first_line(call_tool: CallTool, workspace: Path) -> None:
    path = workspace / "f.txt"
    path.write_text("a\nb\n")
    assert await read(call_tool, path, offset=0) == "     1\ta\n     2\tb"


async def test_default_limit_is_2000_lines(call_tool: CallTool, workspace: Path) -> None:
    path = workspace / "big.txt"
    path.write_text("".join(f"{i}\n" for i in range(1, 2501)))
    lines = (await read(call_tool, path)).split("\n")
    assert lines[1999] == "  2000\t2000"
    assert lines[-1] == "(Showing lines 1-2000 of 2500. Call Read with offset=2001 to read on.)"


async def test_crlf_endings_are_removed(call_tool: CallTool, workspace: Path) -> None:
    path = workspace / "win.txt"
    path.write_bytes(b"one\r\ntwo\r\n")
    assert await read(call_tool, path) == "     1\tone\n     2\ttwo"


async def test_invalid_utf8_is_replaced(call_tool: CallTool, workspace: Path) -> None:
    path = workspace / "latin1.txt"
    path.write_bytes(b"caf\xe9\n")
    assert await read(call_tool, path) == "     1\tcaf\ufffd"


async def test_long_lines_are_cut_and_the_cut_is_said(call_tool: CallTool, workspace: Path) -> None:
    path = workspace / "long.txt"
    path.write_text("short\n" + "x" * 2500 + "\nend\n")
    lines = (await read(call_tool, path)).split("\n")
    assert lines[1] == "     2\t" + "x" * 2000
    assert lines[2] == "     3\tend"
    assert lines[-1] == (
        "(Line 2 is longer than 2000 characters and is shown cut to its first 2000.)"
    )


async def test_empty_file_gives_a_warning_not_an_error(
    call_tool: CallTool, workspace: Path
) -> None:
    path = workspace / "empty.txt"
    path.write_bytes(b"")
    output = await call_tool(TOOL, {"file_path": str(path)})
    assert not output.is_error
    assert text_of(output) == f"Warning: {path} exists but is empty (0 bytes)."


async def test_offset_past_the_end_says_how_many_lines(
    call_tool: CallTool, workspace: Path
) -> None:
    path = workspace / "three.txt"
    path.write_text("a\nb\nc\n")
    text = await read(call_tool, path, offset=10)
    assert text.startswith(f"Warning: {path} has 3 lines, so offset 10 is past its end.")


async def test_output_stops_before_the_budget(call_tool: CallTool, workspace: Path) -> None:
    path = workspace / "wide.txt"
    path.write_text(("y" * 1999 + "\n") * 200)
    text = await read(call_tool, path, limit=200)
    budget = TOOL.traits.max_result_chars - 1000
    assert TOOL.traits.max_result_chars == 50_000, "Read's budget is the default overall cap"
    assert len(text) <= TOOL.traits.max_result_chars
    shown = budget // len(f"{1:>6}\t{'y' * 1999}\n")
    note = f"(Showing lines 1-{shown} of 200 (stopped there to stay within {budget} characters)."
    assert note in text
    assert f"\n{shown:>6}\t" in text and f"\n{shown + 1:>6}\t" not in text


async def test_directory_is_refused_with_advice(call_tool: CallTool, workspace: Path) -> None:
    (workspace / "sub").mkdir()
    with pytest.raises(ToolError, match=r"is a directory.*Use LS"):
        await read(call_tool, workspace / "sub")


async def test_missing_file_is_an_error(call_tool: CallTool, workspace: Path) -> None:
    with pytest.raises(ToolError, match="does not exist"):
        await read(call_tool, workspace / "nope.txt")


async def test_dev_zero_is_refused(call_tool: CallTool) -> None:
    with pytest.raises(ConfinementError, match="outside the workspace"):
        await read(call_tool, "/dev/zero")


async def test_fifo_inside_the_workspace_is_refused_without_hanging(
    call_tool: CallTool, workspace: Path
) -> None:
    fifo = workspace / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(ConfinementError, match="not a regular file"):
        await asyncio.wait_for(read(call_tool, fifo), timeout=5)


async def test_symlink_pointing_outside_is_refused(
    call_tool: CallTool, workspace: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    secret = tmp_path_factory.mktemp("outside") / "secret.txt"
    secret.write_text("top secret\n")
    (workspace / "link.txt").symlink_to(secret)
    with pytest.raises(ConfinementError, match="outside the workspace") as caught:
        await read(call_tool, workspace / "link.txt")
    assert "top secret" not in str(caught.value)


async def test_symlink_inside_the_workspace_is_followed(
    call_tool: CallTool, workspace: Path
) -> None:
    (workspace / "real.txt").write_text("hello\n")
    (workspace / "alias.txt").symlink_to(workspace / "real.txt")
    assert await read(call_tool, workspace / "alias.txt") == "     1\thello"


async def test_dotdot_escape_is_refused(
    call_tool: CallTool, workspace: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    outside = tmp_path_factory.mktemp("elsewhere") / "x.txt"
    outside.write_text("x\n")
    escape = f"{workspace}/../{outside.parent.name}/x.txt"
    with pytest.raises(ConfinementError, match="outside the workspace"):
        await read(call_tool, escape)


async def test_relative_path_is_refused_by_validate(call_tool: CallTool) -> None:
    with pytest.raises(ToolInputError, match="must be an absolute path"):
        await read(call_tool, "notes.txt")


async def test_binary_file_is_refused(call_tool: CallTool, workspace: Path) -> None:
    path = workspace / "blob.bin"
    path.write_bytes(b"ELF\x00\x01\x02" + b"text" * 10)
    with pytest.raises(ToolError, match="is a binary file"):
        await read(call_tool, path)


async def test_large_file_needs_offset_or_limit(call_tool: CallTool, workspace: Path) -> None:
    path = workspace / "large.log"
    path.write_text("0123456789abcdef\n" * (MAX_WHOLE_FILE_BYTES // 16))
    size = path.stat().st_size
    with pytest.raises(ToolError) as caught:
        await read(call_tool, path)
    assert f"is {size} bytes" in str(caught.value)
    assert "offset and limit" in str(caught.value)
    assert await read(call_tool, path, offset=5, limit=1) == "     5\t0123456789abcdef" + (
        f"\n\n(Showing lines 5-5 of {MAX_WHOLE_FILE_BYTES // 16}. Call Read with offset=6 "
        "to read on.)"
    )


async def test_the_whole_file_is_recorded_even_for_a_window(
    call_tool: CallTool, workspace: Path, session: Session
) -> None:
    path = workspace / "rec.txt"
    data = b"".join(b"row %d\n" % i for i in range(100))
    path.write_bytes(data)
    await read(call_tool, path, offset=50, limit=2)
    record = session.reads[path]
    assert record.sha256 == hashlib.sha256(data).hexdigest()
    assert record.mtime_ns == path.stat().st_mtime_ns


async def test_small_png_comes_back_as_an_image(call_tool: CallTool, workspace: Path) -> None:
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
    (workspace / "pic.png").write_bytes(png)
    output = await call_tool(TOOL, {"file_path": str(workspace / "pic.png")})
    assert output.content == [ImageContent(media_type="image/png", data=png)]


def test_numbers_may_come_as_strings() -> None:
    args = ReadInput.model_validate({"file_path": "/w/f", "limit": "10", "offset": "2"})
    assert (args.limit, args.offset) == (10, 2)


@pytest.mark.parametrize(
    ("raw", "complaint"),
    [
        ({"file_path": "/w/f", "bogus": 1}, "Extra inputs are not permitted"),
        ({"file_path": "/w/f", "limit": -1}, "greater than 0"),
        ({"file_path": "/w/f", "limit": 0}, "greater than 0"),
        ({"file_path": "/w/f", "offset": -1}, "greater than or equal to 0"),
        ({"file_path": "/w/f", "limit": True}, "got a boolean"),
        ({"file_path": "/w/f", "limit": "ten"}, "valid integer"),
        ({}, "Field required"),
    ],
)
def test_schema_rejects_bad_input(raw: dict[str, object], complaint: str) -> None:
    with pytest.raises(ValidationError, match=complaint):
        ReadInput.model_validate(raw)


def test_advertised_schema_is_strict_and_standard() -> None:
    schema = TOOL.input_schema()
    assert schema["additionalProperties"] is False
    assert schema["required"] == ["file_path"]
    assert schema["properties"]["limit"] == {
        "description": schema["properties"]["limit"]["description"],
        "exclusiveMinimum": 0,
        "type": "integer",
    }
    assert schema["properties"]["offset"]["minimum"] == 0
    json.dumps(schema)


def test_touched_paths_say_whether_inside(workspace: Path, session: Session) -> None:
    inside = TOOL.analyse(ReadInput(file_path=f"{workspace}/a.txt"), session).paths
    outside = TOOL.analyse(ReadInput(file_path="/etc/hostname"), session).paths
    assert (inside[0].path, inside[0].access, inside[0].inside_workspace) == (
        workspace / "a.txt",
        "read",
        True,
    )
    assert outside[0].inside_workspace is False


# --- summaries ----------------------------------------------------------------------------------


async def summary(workspace: Path, raw: dict[str, object]) -> str:
    _, text = await run_summarized(TOOL, raw, make_context(workspace))
    return text


async def test_summary_counts_the_lines_shown_with_the_workspace_relative_path(
    workspace: Path,
) -> None:
    source = workspace / "src" / "app.py"
    source.parent.mkdir()
    source.write_text("".join(f"line {n}\n" for n in range(1, 121)))
    assert await summary(workspace, {"file_path": str(source)}) == "Read 120 lines of src/app.py"
    window = {"file_path": str(source), "offset": 100, "limit": 5}
    assert await summary(workspace, window) == "Read 5 lines of src/app.py (lines 100-104 of 120)"
    single = {"file_path": str(source), "offset": 120}
    assert await summary(workspace, single) == "Read 1 line of src/app.py (lines 120-120 of 120)"


async def test_summary_of_warnings_images_and_failures(workspace: Path) -> None:
    (workspace / "empty.txt").write_bytes(b"")
    (workspace / "short.txt").write_text("a\nb\n")
    (workspace / "pic.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64)
    assert (
        await summary(workspace, {"file_path": str(workspace / "empty.txt")})
        == "Read empty.txt: the file is empty"
    )
    past = {"file_path": str(workspace / "short.txt"), "offset": 9}
    assert await summary(workspace, past) == "Read short.txt: offset 9 is past its end (2 lines)"
    png = {"file_path": str(workspace / "pic.png")}
    assert await summary(workspace, png) == "Read PNG image pic.png"
    missing = {"file_path": str(workspace / "nope.txt")}
    assert await summary(workspace, missing) == "Read failed: no such file or directory"
    assert (
        await summary(workspace, {"file_path": str(workspace)})
        == f"Read failed: {workspace} is a directory, not a file"
    )
    outside = {"file_path": "/etc/hostname"}
    assert await summary(workspace, outside) == "Read failed: path outside the workspace"


async def _peak_bytes(call: Awaitable[str]) -> tuple[str, int]:
    """What `call` returns, and the most memory it held at once (every thread counted)."""
    tracemalloc.start()
    try:
        text = await call
        return text, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


async def test_a_huge_line_is_cut_before_it_is_decoded(
    call_tool: CallTool, workspace: Path
) -> None:
    path = workspace / "one-line.txt"
    size = MAX_FILE_BYTES - 1  # the largest file Read opens: one line and its newline
    path.write_bytes(b"z" * (size - 1) + b"\n")
    text, peak = await _peak_bytes(read(call_tool, path, offset=1, limit=1))
    assert text == (
        "     1\t" + "z" * MAX_LINE_CHARS + "\n\n(Line 1 is longer than 2000 characters and is "
        "shown cut to its first 2000.)"
    )
    # The file's bytes are held (their hash is recorded); a copy or a decoded line never is.
    assert peak < size + (4 << 20), f"{peak} bytes held reading a {size}-byte line"


async def test_a_window_deep_into_millions_of_lines_does_not_split_the_file(
    call_tool: CallTool, workspace: Path
) -> None:
    path = workspace / "many-lines.txt"
    path.write_bytes(b"a\n" * 4_000_000)
    text, peak = await _peak_bytes(read(call_tool, path, offset=3_999_999, limit=5))
    assert text == "3999999\ta\n4000000\ta"
    assert peak < 8_000_000 + (4 << 20), f"{peak} bytes held for a 2-line window"


async def test_a_cut_line_keeps_whole_characters(call_tool: CallTool, workspace: Path) -> None:
    # Two- and three-byte characters, more bytes than are decoded: the part shown is exact.
    path = workspace / "wide.txt"
    path.write_text("é" * 1_999 + "€" * 3_000 + "\r\nnext\n", encoding="utf-8")
    assert (await read(call_tool, path)).split("\n")[:2] == [
        "     1\t" + "é" * 1_999 + "€",
        "     2\tnext",
    ]


_PIECES = st.sampled_from(
    [b"a", b"xyz ", b"\r", b"\n", b"\r\n", b"\xc3\xa9", b"\xe2\x82", b"\xff", b"\x00", b"\t"]
)


@settings(max_examples=400, deadline=None)
@given(
    pieces=st.lists(_PIECES | st.binary(max_size=6), max_size=80),
    long_line=st.sampled_from([0, MAX_LINE_CHARS - 1, MAX_LINE_CHARS, MAX_LINE_CHARS + 1]),
    multibyte=st.booleans(),
    offset=st.none() | st.integers(min_value=0, max_value=12),
    limit=st.none() | st.integers(min_value=1, max_value=12),
    slack=st.integers(min_value=-40, max_value=40) | st.just(10**9),
)
def test_a_window_decoded_at_once_is_the_one_decoded_line_by_line(
    pieces: list[bytes],
    long_line: int,
    multibyte: bool,
    offset: int | None,
    limit: int | None,
    slack: int,
) -> None:
    data = b"".join(pieces) + (b"\xc3\xa9" if multibyte else b"x") * long_line + b"".join(pieces)
    # About what the numbered lines take, give or take: where the window stops for its budget.
    budget = max(1, len(data) + 8 * data.count(b"\n") + slack)
    fast = read_module._window(Path("/w/f"), data, offset, limit, budget)
    with mock.patch.object(read_module, "_whole_window", lambda *args: None):
        slow = read_module._window(Path("/w/f"), data, offset, limit, budget)
    assert fast == slow


# --- Hostile files (attacker round 52) ---------------------------------------------------------


async def test_a_pdf_larger_than_read_opens_is_refused_before_it_is_loaded(
    call_tool: CallTool, workspace: Path
) -> None:
    path = workspace / "sparse.pdf"
    with path.open("wb") as out:  # sparse: a gigabyte that takes no disk
        out.write(b"%PDF-1.4\n")
        out.truncate(1 << 30)
    with pytest.raises(ToolError, match="more than the") as caught:
        await _peak_bytes(read(call_tool, path))
    assert "1073741824 bytes" in str(caught.value)


async def test_a_notebook_larger_than_read_shows_is_refused_before_it_is_parsed(
    call_tool: CallTool, workspace: Path
) -> None:
    path = workspace / "huge.ipynb"
    path.write_bytes(b'{"cells":[' + b"{}," * (3 << 20) + b"{}]}")  # 9 MiB of empty cells
    with pytest.raises(ToolError, match="notebook"):
        await read(call_tool, path)


async def test_a_notebook_of_countless_values_is_refused_before_it_is_parsed(
    call_tool: CallTool, workspace: Path
) -> None:
    # Small on disk, but every `{}` would be a Python dict: about seventy times its size.
    path = workspace / "dense.ipynb"
    path.write_bytes(b'{"cells":[' + b"{}," * 80_000 + b"{}]}")
    assert path.stat().st_size < read_module.MAX_WHOLE_FILE_BYTES
    with pytest.raises(ToolError, match="notebook"):
        await read(call_tool, path)


def threads_loading(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The threads Read loads files on, from now on (appended to the list returned)."""
    seen: list[int] = []
    real = read_module._load

    def spying(*args: Any, **kwargs: Any) -> Any:
        seen.append(threading.get_ident())
        return real(*args, **kwargs)

    monkeypatch.setattr(read_module, "_load", spying)
    return seen


async def test_a_large_file_is_read_off_the_event_loop(
    call_tool: CallTool, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What decides where it is read is the opened file's own size (no size is looked up by
    # path first: a small file could be swapped for a large one in between).
    path = workspace / "large.txt"
    path.write_text("line\n" * 40_000)  # 200 KB
    loop_thread = threading.get_ident()
    seen = threads_loading(monkeypatch)
    text = await read(call_tool, path, offset=1, limit=2)
    assert text.startswith("     1\tline\n     2\tline\n")
    assert seen and loop_thread not in seen


@pytest.mark.parametrize("extra", [{"pages": "1"}, {"offset": 50}])
async def test_a_read_that_showed_nothing_of_the_file_does_not_unlock_edit(
    call_tool: CallTool, workspace: Path, session: Session, extra: dict[str, Any]
) -> None:
    path = workspace / "e.txt"
    path.write_text("secret=1\n")
    with contextlib.suppress(ToolError):
        await call_tool(TOOL, {"file_path": str(path), **extra})
    assert path not in session.reads


@pytest.mark.parametrize("kind", ["image", "pdf without pages"])
async def test_a_read_that_did_not_show_the_files_text_does_not_unlock_edit(
    call_tool: CallTool, workspace: Path, session: Session, kind: str
) -> None:
    path = workspace / "hidden.bin"
    if kind == "image":
        path.write_bytes(b"GIF89a\nAPI_KEY=hidden-from-the-model\n")
    else:
        import io

        import pypdf

        empty = io.BytesIO()
        pypdf.PdfWriter().write(empty)
        path.write_bytes(empty.getvalue() + b"\nAPI_KEY=hidden-from-the-model\n")
    with contextlib.suppress(ToolError):
        await call_tool(TOOL, {"file_path": str(path)})
    assert path not in session.reads


def test_a_file_growing_while_it_is_read_on_the_event_loop_goes_to_a_thread(
    workspace: Path,
) -> None:
    path = workspace / "growing.txt"
    path.write_bytes(b"x\n" * 100_000)
    fd = os.open(path, os.O_RDONLY)
    try:
        # As if fstat had seen it small: the rest arrives while it is being read.
        with pytest.raises(read_module._TooLargeInline):
            read_module._load(fd, path, 10, os.pread, inline=True)
    finally:
        os.close(fd)


async def test_a_small_file_not_in_the_page_cache_is_read_off_the_event_loop(
    call_tool: CallTool, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attacker round 75: an ext4 image whose loop device reads a file a hung FUSE server
    serves held the event loop forever on a Read of a small file that missed the cache. The
    event loop reads only what the page cache holds; a miss is read in a thread."""
    path = workspace / "cold.txt"
    uncached = write_uncached(path, b"cold line\n" * 2048)  # 20 KiB, none of it cached
    loop_thread = threading.get_ident()
    seen = threads_loading(monkeypatch)
    assert (await read(call_tool, path, limit=1)).startswith("     1\tcold line")
    if uncached:
        assert seen and loop_thread not in seen
    seen.clear()
    await read(call_tool, path, limit=1)  # cached now: read where it is cheapest
    assert seen == [loop_thread]
