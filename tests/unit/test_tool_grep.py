"""Grep with the real ripgrep: output modes, flags, paging, filters, errors, confinement."""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from pathlib import Path

import pytest

from daemon.errors import ConfinementError, ToolError, ToolInputError
from daemon.host.landlock import Confined, find_helper
from daemon.models import TextContent
from daemon.tools.contract import CallContext, ProgressUpdate
from daemon.tools.grep import tool as grep_module
from daemon.tools.grep.input import GrepInput, build_argv
from daemon.tools.grep.ripgrep import Collector, RunningSearches, run_rg
from daemon.tools.grep.tool import GrepTool
from tests.unit.conftest import CallTool
from tests.unit.fake_sandbox import listen, make_context, run_summarized

pytestmark = pytest.mark.skipif(shutil.which("rg") is None, reason="ripgrep (rg) is not installed")

TOOL = GrepTool()


def make(root: Path, rel: str, text: str, mtime: int = 1_000) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.utime(path, (mtime, mtime))
    return path


async def grep(call_tool: CallTool, pattern: str, **extra: object) -> str:
    output = await call_tool(TOOL, {"pattern": pattern, **extra})
    assert not output.is_error
    return "".join(b.text for b in output.content if isinstance(b, TextContent))


@pytest.fixture
def code(workspace: Path) -> Path:
    make(workspace, "app.py", "import os\ndef main():\n    return TODO\n", 2_000)
    make(workspace, "lib/util.py", "x = 1\n# todo later\ny = 2\nTODO = 3\n", 3_000)
    make(workspace, "web/app.js", "// TODO js\n", 1_000)
    make(workspace, ".env.example", "TODO=secret\n", 500)
    make(workspace, ".git/config", "TODO in git internals\n", 4_000)
    return workspace


async def test_files_with_matches_is_the_default_newest_first(
    call_tool: CallTool, code: Path
) -> None:
    assert await grep(call_tool, "TODO") == "\n".join(
        [
            "Found 4 files",
            f"{code}/lib/util.py",
            f"{code}/app.py",
            f"{code}/web/app.js",
            f"{code}/.env.example",  # hidden files are searched, .git is not
        ]
    )


async def test_content_mode_shows_path_line_text(call_tool: CallTool, code: Path) -> None:
    assert await grep(call_tool, "TODO", output_mode="content", glob="*.py") == "\n".join(
        [f"{code}/app.py:3:    return TODO", f"{code}/lib/util.py:4:TODO = 3"]
    )


async def test_line_numbers_can_be_turned_off(call_tool: CallTool, code: Path) -> None:
    text = await grep(call_tool, "TODO =", output_mode="content", **{"-n": "false"})
    assert text == f"{code}/lib/util.py:TODO = 3"


async def test_ignore_case(call_tool: CallTool, code: Path) -> None:
    text = await grep(
        call_tool, "todo", output_mode="content", path=str(code / "lib"), **{"-i": True}
    )
    assert text == f"{code}/lib/util.py:2:# todo later\n{code}/lib/util.py:4:TODO = 3"


async def test_context_lines(call_tool: CallTool, code: Path) -> None:
    text = await grep(call_tool, "later", output_mode="content", **{"-C": "1"})
    assert text == "\n".join(
        [
            f"{code}/lib/util.py-1-x = 1",
            f"{code}/lib/util.py:2:# todo later",
            f"{code}/lib/util.py-3-y = 2",
        ]
    )


async def test_context_and_minus_c_must_agree(call_tool: CallTool, code: Path) -> None:
    with pytest.raises(ToolInputError, match="give only one of them"):
        await grep(call_tool, "x", output_mode="content", context=1, **{"-C": 2})


async def test_only_matching(call_tool: CallTool, code: Path) -> None:
    text = await grep(call_tool, r"TODO \w+", output_mode="content", **{"-o": True})
    assert text == f"{code}/web/app.js:1:TODO js"


async def test_count_mode_with_total(call_tool: CallTool, code: Path) -> None:
    text = await grep(call_tool, "(?i)todo", output_mode="count", type="py")
    assert text == "\n".join(
        [
            f"{code}/app.py:1",
            f"{code}/lib/util.py:2",
            "Total: 3 matching lines in 2 files",
        ]
    )


async def test_head_limit_and_offset_page_through_content(
    call_tool: CallTool, workspace: Path
) -> None:
    make(workspace, "n.txt", "".join(f"hit {i}\n" for i in range(1, 6)))
    text = await grep(call_tool, "hit", output_mode="content", head_limit=2, offset="1")
    assert text == "\n".join(
        [
            f"{workspace}/n.txt:2:hit 2",
            f"{workspace}/n.txt:3:hit 3",
            "(Showing lines 2-3 of 5. Use offset=3 to see the next ones, or narrow the search.)",
        ]
    )
    last = await grep(call_tool, "hit", output_mode="content", head_limit=2, offset=4)
    assert last == f"{workspace}/n.txt:5:hit 5\n(Showing lines 5-5 of 5.)"


async def test_head_limit_applies_to_file_entries(call_tool: CallTool, workspace: Path) -> None:
    for i in range(300):
        make(workspace, f"f{i:03}.txt", "needle\n", 10_000 + i)
    lines = (await grep(call_tool, "needle")).split("\n")
    assert lines[0] == "Found 300 files"
    assert lines[1] == f"{workspace}/f299.txt"
    assert len(lines) == 1 + 250 + 1
    assert lines[-1] == (
        "(Showing entries 1-250 of 300. Use offset=250 to see the next ones, or narrow the search.)"
    )
    unlimited = (await grep(call_tool, "needle", head_limit=0)).split("\n")
    assert len(unlimited) == 301


async def test_no_matches(call_tool: CallTool, code: Path) -> None:
    assert await grep(call_tool, "nothing-like-this") == "No matches found"


async def test_bad_regex_quotes_ripgrep(call_tool: CallTool, code: Path) -> None:
    with pytest.raises(ToolError) as caught:
        await grep(call_tool, "foo(")
    message = str(caught.value)
    assert "regex parse error" in message
    assert "unclosed group" in message
    assert "escape literal" in message


async def test_unknown_type_is_explained(call_tool: CallTool, code: Path) -> None:
    with pytest.raises(ToolError, match="unrecognized file type"):
        await grep(call_tool, "x", type="nosuchtype")


async def test_pattern_starting_with_a_dash_is_a_pattern(
    call_tool: CallTool, workspace: Path
) -> None:
    make(workspace, "opts.txt", "use --files here\n")
    text = await grep(call_tool, "--files", output_mode="content")
    assert text == f"{workspace}/opts.txt:1:use --files here"


async def test_multiline(call_tool: CallTool, workspace: Path) -> None:
    make(workspace, "m.txt", "start\nmiddle\nend\n")
    assert await grep(call_tool, "start.*end") == "No matches found"
    assert await grep(call_tool, "start.*end", multiline="true") == (
        f"Found 1 file\n{workspace}/m.txt"
    )


async def test_symlink_out_is_not_searched(
    call_tool: CallTool, workspace: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    secret = make(tmp_path_factory.mktemp("outside"), "secret.txt", "password=hunter2\n")
    (workspace / "link.txt").symlink_to(secret)
    assert await grep(call_tool, "hunter2") == "No matches found"
    with pytest.raises(ConfinementError):
        await grep(call_tool, "hunter2", path=str(workspace / "link.txt"))


async def test_fifo_path_is_refused_without_hanging(call_tool: CallTool, workspace: Path) -> None:
    os.mkfifo(workspace / "pipe")
    with pytest.raises(ConfinementError, match="not a regular file"):
        await asyncio.wait_for(grep(call_tool, "x", path=str(workspace / "pipe")), timeout=5)


async def test_path_outside_and_missing_path(call_tool: CallTool, workspace: Path) -> None:
    with pytest.raises(ConfinementError, match="outside the workspace"):
        await grep(call_tool, "root", path="/etc")
    with pytest.raises(ToolError, match="does not exist"):
        await grep(call_tool, "x", path=str(workspace / "missing"))


async def test_missing_ripgrep_is_a_clear_error(
    call_tool: CallTool, code: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    with pytest.raises(ToolError, match="ripgrep \\(rg\\), which is not installed"):
        await grep(call_tool, "TODO")


def sleep_for(seconds: str) -> list[str]:
    """`sleep` through the confinement wrapper, allowed everything (run_rg runs wrapped
    commands: the wrapper enters the search root)."""
    return [find_helper(), "--read", "/", "--exec", "/", "--", "sleep", seconds]


async def test_cancel_kills_the_process(workspace: Path) -> None:
    root = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY)
    try:
        task = asyncio.create_task(run_rg(sleep_for("30"), root, Collector(0, None), 60))
        await asyncio.sleep(0.2)
        started = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        os.close(root)
    assert time.monotonic() - started < 25  # waiting for `sleep 30` would take 30 s


async def test_timeout_kills_the_process(workspace: Path) -> None:
    root = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY)
    started = time.monotonic()
    try:
        with pytest.raises(ToolError, match=r"longer than 0\.3 s"):
            await run_rg(sleep_for("30"), root, Collector(0, None), 0.3)
    finally:
        os.close(root)
    assert time.monotonic() - started < 25


def test_dashed_names_in_schema_and_by_name() -> None:
    properties = GrepTool().input_schema()["properties"]
    assert {"-A", "-B", "-C", "-n", "-i", "-o", "type", "context"} <= properties.keys()
    assert properties["-A"]["minimum"] == 0
    by_alias = GrepInput.model_validate({"pattern": "x", "-A": "2", "-i": "true"})
    by_name = GrepInput.model_validate({"pattern": "x", "after": 2, "ignore_case": True})
    assert by_alias == by_name
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        GrepInput.model_validate({"pattern": "x", "head_limit": -1})
    with pytest.raises(ValueError, match="Extra inputs are not permitted"):
        GrepInput.model_validate({"pattern": "x", "-z": 1})


# --- summaries and progress ---------------------------------------------------------------------


async def summarized(
    workspace: Path, pattern: str, **extra: object
) -> tuple[str, list[ProgressUpdate]]:
    """The summary of a search and the progress it reported."""
    ctx = make_context(workspace)
    updates = listen(ctx)
    _, text = await run_summarized(TOOL, {"pattern": pattern, **extra}, ctx)
    return text, updates


async def summary(workspace: Path, pattern: str, **extra: object) -> str:
    return (await summarized(workspace, pattern, **extra))[0]


async def test_summary_of_each_mode(code: Path) -> None:
    assert await summary(code, "TODO") == "Found 4 files matching 'TODO'"
    assert await summary(code, "TODO", path=str(code / "lib")) == (
        "Found 1 file matching 'TODO' in lib/"
    )
    assert await summary(code, "TODO", output_mode="content", **{"-C": 1}) == (
        "Found 4 lines matching 'TODO' in 4 files"
    )
    assert await summary(code, "(?i)todo", output_mode="count", type="py") == (
        "Counted 3 lines matching '(?i)todo' in 2 files"
    )
    assert await summary(code, "TODO ") == "Found 2 files matching 'TODO '", "spaces are kept"
    assert await summary(code, "nothing here") == "No matches for 'nothing here'"
    assert await summary(code, "(unclosed") == "Grep failed: ripgrep could not run the search"


async def test_the_final_progress_gives_files_searched_or_files_found(code: Path) -> None:
    _, updates = await summarized(code, "TODO", output_mode="content")
    assert updates[-1].files_scanned == 4, "app.py, lib/util.py, web/app.js, .env.example"
    assert updates[-1].message == "searched 4 files"
    _, updates = await summarized(code, "TODO")
    assert updates[-1].message == "4 matching files found"


async def test_running_counts_are_reported_while_ripgrep_streams(
    code: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(grep_module, "PROGRESS_INTERVAL_S", 0.0)
    _, updates = await summarized(code, "TODO")
    messages = [update.message for update in updates]
    assert messages[:4] == [
        "1 matching file so far",
        "2 matching files so far",
        "3 matching files so far",
        "4 matching files so far",
    ]


async def test_lines_that_look_like_ripgrep_stats_are_still_results(workspace: Path) -> None:
    make(workspace, "log.txt", "12 files searched\n3 matches\nnothing\n")
    output, text = await run_summarized(
        TOOL, {"pattern": "searched|matches", "output_mode": "content"}, make_context(workspace)
    )
    assert "".join(b.text for b in output.content if isinstance(b, TextContent)) == (
        f"{workspace}/log.txt:1:12 files searched\n{workspace}/log.txt:2:3 matches"
    )
    assert text == "Found 2 lines matching 'searched|matches' in 1 file"


def test_searches_side_by_side_share_the_cores() -> None:
    searches = RunningSearches(cores=2)
    with searches.share() as alone:
        assert alone is None  # ripgrep's own default: one search may use every core
        with searches.share() as second, searches.share() as third:
            assert (second, third) == (1, 1)
    with searches.share() as later:
        assert later is None, "a finished search no longer counts"
    many = RunningSearches(cores=8)
    with many.share(), many.share() as two_of_them:
        assert two_of_them == 4


def test_the_thread_cap_reaches_the_command_line() -> None:
    args = GrepInput(pattern="x")
    assert not any(a.startswith("--threads") for a in build_argv(Confined(("rg",), ()), args, "."))
    assert "--threads=1" in build_argv(Confined(("rg",), ()), args, ".", threads=1)


async def test_the_mtime_sort_stops_at_the_call_s_time_limit(
    call_tool: CallTool, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A filesystem slow to answer must not hold a thread past the call: the files not looked
    at in time keep the search's order, after the sorted ones, and the answer says so."""
    for i in range(300):
        make(workspace, f"f{i:03}.txt", "needle\n", 10_000 + i)
    # Read when the deadline is set, then before the first and the second batch of files; the
    # third look finds the time limit passed.
    times = iter([0.0, 1.0, 2.0])
    monkeypatch.setattr(grep_module, "_clock", lambda: next(times, float("inf")))
    lines = (await grep(call_tool, "needle", head_limit=0)).split("\n")
    assert lines[0] == "Found 300 files"
    entries = lines[1:301]
    assert sorted(entries) == sorted(f"{workspace}/f{i:03}.txt" for i in range(300))
    looked = 2 * grep_module.STAMP_CHECK_EVERY
    newest = [f"{workspace}/f{i:03}.txt" for i in range(299, -1, -1)]
    assert entries[:looked] == [entry for entry in newest if entry in entries[:looked]]
    assert set(entries[looked:]).isdisjoint(entries[:looked])
    assert lines[-1].startswith(f"(The last {300 - looked} files follow in the order")


async def test_every_file_is_sorted_when_time_allows(call_tool: CallTool, workspace: Path) -> None:
    for i in range(300):
        make(workspace, f"f{i:03}.txt", "needle\n", 10_000 + i)
    lines = (await grep(call_tool, "needle", head_limit=0)).split("\n")
    assert lines[1:] == [f"{workspace}/f{i:03}.txt" for i in range(299, -1, -1)]


async def test_a_search_holds_no_more_memory_than_its_limit_whatever_a_line_takes(
    call_tool: CallTool, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attacker round 141: ripgrep holds a whole line in memory, so Greps over a file that is one
    1 GB line took 1.2 GB each on the host, outside every budget (8 at once: 10 GB). Each search
    runs under an address-space limit and says so when a line does not fit."""
    monkeypatch.setattr(grep_module, "SEARCH_MEMORY_MB", 64)
    (workspace / "one-line").write_bytes(b"a" * (160 << 20))
    with pytest.raises(ToolError, match="memory a search may use \\(64 MB\\)"):
        await grep(call_tool, "zz", output_mode="content")
    make(workspace, "small.txt", "zz here\n")
    assert "small.txt" in await grep(call_tool, "zz", glob="small.txt")


async def test_each_search_takes_its_principals_turn(
    call_tool: CallTool, ctx: CallContext, code: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Round 141: one tenant ran as many searches at once as its calls allow; each holds up to
    its memory limit, so a principal runs a few at a time and all principals a few more."""
    taken: list[str] = []
    real = grep_module.SEARCH_TURNS.turn

    def recording(who: str) -> object:
        taken.append(who)
        return real(who)

    monkeypatch.setattr(grep_module.SEARCH_TURNS, "turn", recording)
    ctx.session.owner = "alice"
    await grep(call_tool, "TODO")
    assert taken == ["alice"]


@pytest.mark.parametrize("field", ["glob", "path"])
def test_a_path_field_holding_a_nul_character_is_refused_with_the_reason(field: str) -> None:
    """CI's fuzz test: Grep given the glob "\\x00" crashed (ripgrep's arguments cannot hold one)."""
    from pydantic import ValidationError

    from daemon.tools.grep.input import GrepInput

    with pytest.raises(ValidationError, match="cannot hold a NUL character"):
        GrepInput.model_validate({"pattern": "x", field: "a\x00b"})
