"""Glob on generated trees: matching rules, mtime order, the cap, confinement."""

from __future__ import annotations

import asyncio
import itertools
import os
import stat
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.errors import ConfinementError, ToolError, ToolInputError
from daemon.models import TextContent
from daemon.tools.contract import ToolOutput
from daemon.tools.glob import engine
from daemon.tools.glob.braces import MAX_PATTERNS, expand_braces
from daemon.tools.glob.engine import MAX_PATTERN_CHARS, MAX_RESULTS, MAX_SCANNED, PROGRESS_EVERY
from daemon.tools.glob.tool import GlobTool
from tests.unit.conftest import CallTool
from tests.unit.fake_sandbox import listen, make_context, run_summarized, run_tool

TOOL = GlobTool()


def make(root: Path, rel: str, mtime: int) -> Path:
    """Create a file with a given mtime (seconds since the epoch)."""
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(rel)
    os.utime(path, (mtime, mtime))
    return path


async def glob(call_tool: CallTool, pattern: str, path: Path | None = None) -> list[str]:
    raw: dict[str, object] = {"pattern": pattern}
    if path is not None:
        raw["path"] = str(path)
    output = await call_tool(TOOL, raw)
    assert not output.is_error
    text = "".join(b.text for b in output.content if isinstance(b, TextContent))
    return text.split("\n")


@pytest.fixture
def tree(workspace: Path) -> Path:
    make(workspace, "a.py", 1_000)
    make(workspace, "src/b.py", 3_000)
    make(workspace, "src/deep/er/c.py", 2_000)
    make(workspace, "src/d.txt", 4_000)
    make(workspace, ".hidden/e.py", 5_000)
    make(workspace, ".f.py", 6_000)
    (workspace / "src" / "pkg.py").mkdir()  # a directory named like a match
    return workspace


async def test_globstar_matches_at_any_depth_newest_first(call_tool: CallTool, tree: Path) -> None:
    assert await glob(call_tool, "**/*.py") == [
        f"{tree}/src/b.py",
        f"{tree}/src/deep/er/c.py",
        f"{tree}/a.py",
    ]


async def test_star_stays_in_one_directory(call_tool: CallTool, tree: Path) -> None:
    assert await glob(call_tool, "*.py") == [f"{tree}/a.py"]
    assert await glob(call_tool, "src/*") == [f"{tree}/src/d.txt", f"{tree}/src/b.py"]


async def test_braces_and_path(call_tool: CallTool, tree: Path) -> None:
    assert await glob(call_tool, "**/*.{txt,py}", tree / "src") == [
        f"{tree}/src/d.txt",
        f"{tree}/src/b.py",
        f"{tree}/src/deep/er/c.py",
    ]


async def test_dot_names_only_when_the_pattern_spells_the_dot(
    call_tool: CallTool, tree: Path
) -> None:
    assert await glob(call_tool, "**/.f.py") == [f"{tree}/.f.py"]
    assert await glob(call_tool, ".hidden/*.py") == [f"{tree}/.hidden/e.py"]


async def test_absolute_pattern_is_split_into_base_and_pattern(
    call_tool: CallTool, tree: Path
) -> None:
    assert await glob(call_tool, f"{tree}/src/*.py") == [f"{tree}/src/b.py"]


async def test_no_match_says_no_files_found(call_tool: CallTool, tree: Path) -> None:
    assert await glob(call_tool, "**/*.rs") == ["No files found"]
    assert await glob(call_tool, "src") == ["No files found"]  # directories are not listed


async def test_cap_at_100_with_a_note(call_tool: CallTool, workspace: Path) -> None:
    for i in range(150):
        make(workspace, f"many/f{i:03}.txt", 10_000 + i)
    lines = await glob(call_tool, "many/*.txt")
    assert len(lines) == 101
    assert lines[0] == f"{workspace}/many/f149.txt"
    assert lines[99] == f"{workspace}/many/f050.txt"
    assert lines[100] == (
        "(Showing the 100 most recently modified of 150 matching files. Narrow the pattern or "
        "the path to see the others.)"
    )


async def test_symlinks_out_are_skipped_and_not_followed(
    call_tool: CallTool, workspace: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    outside = tmp_path_factory.mktemp("outside")
    make(outside, "secret.py", 1)
    make(outside, "pkg/mod.py", 1)
    make(workspace, "inside.py", 2)
    (workspace / "out_link.py").symlink_to(outside / "secret.py")
    (workspace / "out_dir").symlink_to(outside / "pkg")
    (workspace / "in_link.py").symlink_to(workspace / "inside.py")
    assert sorted(await glob(call_tool, "**/*.py")) == [
        f"{workspace}/in_link.py",
        f"{workspace}/inside.py",
    ]


async def test_path_outside_is_refused(call_tool: CallTool) -> None:
    with pytest.raises(ConfinementError, match="outside the workspace"):
        await glob(call_tool, "*", Path("/etc"))


async def test_missing_or_file_path_is_an_error(call_tool: CallTool, tree: Path) -> None:
    with pytest.raises(ToolError, match="does not exist"):
        await glob(call_tool, "*", tree / "nope")
    with pytest.raises(ToolError, match="is not a directory"):
        await glob(call_tool, "*", tree / "a.py")


async def test_dotdot_in_the_pattern_is_refused(call_tool: CallTool, tree: Path) -> None:
    with pytest.raises(ToolInputError, match=r"contains '\.\.'"):
        await glob(call_tool, "../*.py")


def test_brace_expansion() -> None:
    assert expand_braces("a/{b,c{d,e}}/*.{x,y}") == [
        "a/b/*.x",
        "a/b/*.y",
        "a/cd/*.x",
        "a/cd/*.y",
        "a/ce/*.x",
        "a/ce/*.y",
    ]
    assert expand_braces("{literal}.py") == ["{literal}.py"]


async def summary(workspace: Path, pattern: str, path: Path | None = None) -> str:
    raw: dict[str, object] = {"pattern": pattern}
    if path is not None:
        raw["path"] = str(path)
    _, text = await run_summarized(TOOL, raw, make_context(workspace))
    return text


async def test_summary_gives_the_pattern_and_the_count(tree: Path) -> None:
    assert await summary(tree, "**/*.py") == "Glob '**/*.py': 3 files"
    assert await summary(tree, "*.py", tree / "src") == "Glob '*.py' in src/: 1 file"
    assert await summary(tree, "**/*.rs") == "Glob '**/*.rs': no files"
    assert await summary(tree, "*", tree / "nowhere") == ("Glob failed: no such file or directory")
    for index in range(MAX_RESULTS + 20):
        make(tree, f"many/f{index:03}.txt", 1_000 + index)
    assert await summary(tree, "many/*.txt") == (
        f"Glob 'many/*.txt': {MAX_RESULTS + 20} files ({MAX_RESULTS} shown)"
    )


async def test_the_walk_reports_entries_scanned_as_it_goes(workspace: Path) -> None:
    for index in range(1_200):
        (workspace / f"f{index:04}.txt").write_text("")
    ctx = make_context(workspace)
    updates = listen(ctx)
    output = await run_tool(TOOL, {"pattern": "*.py"}, ctx)
    assert "No files found" in "".join(getattr(b, "text", "") for b in output.content)
    scanned = [update.files_scanned for update in updates]
    assert scanned[:2] == [PROGRESS_EVERY, 2 * PROGRESS_EVERY]
    assert scanned[-1] == 1_200, "the last report gives the final count"
    assert scanned == sorted(scanned)


def _nest(root: Path, levels: int) -> Path:
    """`levels` nested folders named d below root, made without long paths; the deepest one."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(levels):
            os.mkdir("d", dir_fd=fd)
            child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        os.close(os.open("deep.py", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))
    finally:
        os.close(fd)
    return root.joinpath(*["d"] * levels)


@pytest.fixture
def deep_tree(workspace: Path) -> Iterator[Path]:
    """1,800 nested folders with a file at the bottom; removed by `rm`, which (unlike pytest's
    clean-up, recursive in Python) has no depth limit."""
    yield _nest(workspace, 1_800)
    subprocess.run(["rm", "-rf", str(workspace / "d")], check=True)


async def test_a_tree_thousands_of_levels_deep_is_walked(
    call_tool: CallTool, deep_tree: Path
) -> None:
    assert await glob(call_tool, "**/deep.py") == [f"{deep_tree}/deep.py"]


# Bounds: one entry budget per call, incremental listing, a deadline, cancellation, braces.


@dataclass
class _FakeEntry:
    """A made-up regular file, as os.scandir describes one."""

    name: str
    mtime_ns: int

    def is_dir(self, *, follow_symlinks: bool = True) -> bool:
        return False

    def is_file(self, *, follow_symlinks: bool = True) -> bool:
        return True

    def is_symlink(self) -> bool:
        return False

    def stat(self, *, follow_symlinks: bool = True) -> SimpleNamespace:
        return SimpleNamespace(st_mtime_ns=self.mtime_ns, st_mode=stat.S_IFREG | 0o644)


class FakeDirectory:
    """Stands in for the listing of one real (empty) directory: `count` made-up files named
    f0000000<suffix>, f0000001<suffix>..., handed out one at a time as os.scandir does, so a test
    sees how far a walk pulled. `before(n)` runs just before the n-th (0-based) is handed out."""

    def __init__(
        self,
        directory: Path,
        count: int,
        suffix: str = ".dat",
        before: Callable[[int], None] | None = None,
    ) -> None:
        self.inode = directory.stat().st_ino
        self.count = count
        self.suffix = suffix
        self.before = before
        self.pulled = 0
        self.closed = threading.Event()
        """Set when a walk closes the listing (it is done with this directory)."""

    def make_real(self, directory: Path, count: int) -> None:
        """Make the first `count` made-up files on disk too, with the same mtimes."""
        for index in range(count):
            path = directory / f"f{index:07}{self.suffix}"
            path.touch()
            os.utime(path, ns=(_fake_mtime_ns(index), _fake_mtime_ns(index)))

    def install(self, monkeypatch: pytest.MonkeyPatch) -> FakeDirectory:
        real = os.scandir

        def scandir(path: Any = None) -> Any:
            if isinstance(path, int) and os.fstat(path).st_ino == self.inode:
                return _FakeListing(self)
            return real(path) if path is not None else real()

        monkeypatch.setattr(os, "scandir", scandir)
        return self


class _FakeListing:
    def __init__(self, directory: FakeDirectory) -> None:
        self._directory = directory
        self._next = 0

    def __enter__(self) -> _FakeListing:
        return self

    def __exit__(self, *exc: object) -> None:
        self._directory.closed.set()

    def close(self) -> None:
        self._directory.closed.set()

    def __iter__(self) -> _FakeListing:
        return self

    def __next__(self) -> _FakeEntry:
        directory = self._directory
        index = self._next
        if index >= directory.count:
            raise StopIteration
        if directory.before is not None:
            directory.before(index)
        self._next += 1
        directory.pulled += 1
        return _FakeEntry(f"f{index:07}{directory.suffix}", _fake_mtime_ns(index))


def _fake_mtime_ns(index: int) -> int:
    return 1_000_000_000 * (index + 1)


def text_of(output: ToolOutput) -> str:
    return "".join(b.text for b in output.content if isinstance(b, TextContent))


async def test_alternatives_share_one_entry_budget(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two directories of 120,000 entries each: either fits the budget, both together do not.
    for name in ("a", "b"):
        (workspace / name).mkdir()
        FakeDirectory(workspace / name, 120_000).install(monkeypatch)
    ctx = make_context(workspace)
    updates = listen(ctx)
    output, summary = await run_summarized(TOOL, {"pattern": "{a,b}/*.txt"}, ctx)
    assert text_of(output) == (
        f"No files found (the search stopped after {MAX_SCANNED} directory entries; give a "
        "narrower path)"
    )
    assert summary == f"Glob '{{a,b}}/*.txt': no files (stopped after {MAX_SCANNED} entries)"
    assert updates[-1].files_scanned <= MAX_SCANNED


async def test_a_huge_directory_is_listed_only_as_far_as_the_budget(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (workspace / "huge").mkdir()
    huge = FakeDirectory(workspace / "huge", 2 * MAX_SCANNED).install(monkeypatch)
    output = await run_tool(TOOL, {"pattern": "huge/*.txt"}, make_context(workspace))
    assert f"the search stopped after {MAX_SCANNED} directory entries" in text_of(output)
    assert huge.pulled <= MAX_SCANNED + 1, "entries past the budget were listed"
    assert huge.closed.is_set()


async def test_the_deadline_ends_the_walk_with_a_partial_result_saying_so(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [0.0]

    def five_then_late(index: int) -> None:
        if index == 5:  # the clock passes the deadline before the sixth entry is handed out
            now[0] += 60.0

    (workspace / "big").mkdir()
    big = FakeDirectory(workspace / "big", 10_000, ".txt", five_then_late)
    big.make_real(workspace / "big", 10)  # matching files are looked at on disk
    big.install(monkeypatch)
    tool = GlobTool(deadline_s=30.0, clock=lambda: now[0])
    output, summary = await run_summarized(tool, {"pattern": "big/*.txt"}, make_context(workspace))
    lines = text_of(output).split("\n")
    assert lines[:5] == [f"{workspace}/big/f{index:07}.txt" for index in (4, 3, 2, 1, 0)]
    assert lines[5:] == [
        "(The search stopped at its time limit of 30 s, so some matches may be missing. Give a "
        "narrower path or pattern.)"
    ]
    assert summary == "Glob 'big/*.txt': 5 files (stopped at the 30 s time limit)"
    assert big.pulled == 6


async def test_a_walk_stuck_in_the_file_system_still_answers_at_the_deadline(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()

    pulled_when_stuck: list[int] = []

    def three_then_stuck(index: int) -> None:
        if index == 3:
            pulled_when_stuck.append(stuck.pulled)
            release.wait(60)  # as a listing blocked in the kernel (a hung network mount)

    (workspace / "nfs").mkdir()
    stuck = FakeDirectory(workspace / "nfs", 1_000, ".txt", three_then_stuck)
    stuck.install(monkeypatch)
    # The walker's own clock never passes the deadline: only the caller's side can end the call.
    tool = GlobTool(deadline_s=0.1, clock=lambda: 0.0)
    try:
        output = await run_tool(tool, {"pattern": "nfs/*.txt"}, make_context(workspace))
        assert not release.is_set(), "the call answered while the walk was still stuck"
    finally:
        release.set()
    lines = text_of(output).split("\n")
    newest = (2, 1, 0)
    assert lines[:3] == [f"{workspace}/nfs/f{index:07}.txt" for index in newest]
    assert lines[-1].startswith("(The search stopped at its time limit of 0.1 s")
    await asyncio.to_thread(stuck.closed.wait, 60)
    assert stuck.closed.is_set() and [stuck.pulled - 1] == pulled_when_stuck, (
        "the walk went on after its deadline"
    )


async def test_cancelling_a_glob_stops_its_walk(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reached = threading.Event()
    release = threading.Event()

    pulled_when_blocked: list[int] = []

    def block_at_fifty(index: int) -> None:
        if index == 50:
            pulled_when_blocked.append(slow.pulled)
            reached.set()
            release.wait(60)

    (workspace / "slow").mkdir()
    slow = FakeDirectory(workspace / "slow", 10_000, ".txt", block_at_fifty).install(monkeypatch)
    task = asyncio.create_task(run_tool(TOOL, {"pattern": "slow/*.txt"}, make_context(workspace)))
    try:
        assert await asyncio.to_thread(reached.wait, 60)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        release.set()
    # The walking thread gets the entry it was blocked on, then sees the cancellation.
    assert await asyncio.to_thread(slow.closed.wait, 60)
    assert [slow.pulled - 1] == pulled_when_blocked, (
        "the walk went on listing after the call was cancelled"
    )


def test_deeply_nested_braces_are_refused_without_recursion() -> None:
    nested = "{" * 5_000 + ",}" * 5_000  # {{{...{,},}...,},}: 5,001 alternatives
    with pytest.raises(ToolInputError, match=f"more than {MAX_PATTERNS} alternatives"):
        expand_braces(nested)
    with pytest.raises(ToolInputError, match=f"more than {MAX_PATTERNS} alternatives"):
        expand_braces("{,}" * 5_000)
    literal = "{" * 5_000 + "}" * 5_000  # no comma anywhere: all literal
    assert expand_braces(literal) == [literal]


async def test_nested_empty_braces_in_a_call_are_an_input_error(call_tool: CallTool) -> None:
    pattern = "{" * 1_365 + ",}" * 1_365  # as deep as the 4,096 characters a pattern may have
    with pytest.raises(ToolInputError, match=f"more than {MAX_PATTERNS} alternatives"):
        await glob(call_tool, pattern)


def _reference_expand(pattern: str) -> list[str]:
    """The recursive expansion Glob used before (same rules), as an oracle for small patterns."""
    out: list[str] = []

    def expand(text: str, search_from: int) -> None:
        if len(out) > MAX_PATTERNS:
            return
        open_at = text.find("{", search_from)
        while open_at != -1:
            depth, commas, close_at = 0, [], -1
            for index in range(open_at, len(text)):
                if text[index] == "{":
                    depth += 1
                elif text[index] == "}":
                    depth -= 1
                    if depth == 0:
                        close_at = index
                        break
                elif text[index] == "," and depth == 1:
                    commas.append(index)
            if close_at == -1 or not commas:
                open_at = text.find("{", open_at + 1)
                continue
            bounds = [open_at, *commas, close_at]
            for start, end in itertools.pairwise(bounds):
                expand(text[:open_at] + text[start + 1 : end] + text[close_at + 1 :], open_at)
            return
        out.append(text)

    expand(pattern, 0)
    return out


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="{},ab", max_size=24))
def test_brace_expansion_keeps_its_rules_and_order(pattern: str) -> None:
    expected = _reference_expand(pattern)
    if len(expected) > MAX_PATTERNS:
        with pytest.raises(ToolInputError):
            expand_braces(pattern)
    else:
        assert expand_braces(pattern) == expected


async def test_alternatives_too_long_in_all_are_refused(call_tool: CallTool) -> None:
    pattern = "{a,b}" * 6 + "*x" * 2_000  # 64 alternatives of 4,006 characters each
    with pytest.raises(ToolInputError) as caught:
        await glob(call_tool, pattern)
    assert str(caught.value).endswith(
        f"expands to 64 alternatives of {64 * 4_006} characters in all, more than "
        f"{MAX_PATTERN_CHARS}; split it into several Glob calls."
    )


def _spy_on_compiling(monkeypatch: pytest.MonkeyPatch) -> list[threading.Thread]:
    """The threads Glob's patterns are compiled on (each walk compiles them once)."""
    threads: list[threading.Thread] = []
    real = engine._compile

    def spy(patterns: Any) -> Any:
        threads.append(threading.current_thread())
        return real(patterns)

    monkeypatch.setattr(engine, "_compile", spy)
    return threads


async def test_long_patterns_are_compiled_by_the_walking_thread(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads = _spy_on_compiling(monkeypatch)
    others = ",".join(f"{'x' * 20}{n}" for n in range(12))
    long = "src/*.{py,txt," + others + "}"  # alternatives of "src/*.xx…xN" past the limit in all
    output = await run_tool(TOOL, {"pattern": long}, make_context(tree))
    assert text_of(output) == f"{tree}/src/d.txt\n{tree}/src/b.py"
    assert threads and threading.current_thread() not in threads


async def test_a_walk_of_many_files_finds_each_once(workspace: Path) -> None:
    count = 300
    for index in range(count):
        make(workspace, f"many/f{index:04}.txt", 1_000 + index)
    output, summary = await run_summarized(TOOL, {"pattern": "**/*.txt"}, make_context(workspace))
    assert summary == f"Glob '**/*.txt': {count} files ({MAX_RESULTS} shown)"
    newest = [f"{workspace}/many/f{index:04}.txt" for index in range(count - 1, -1, -1)]
    assert text_of(output).split("\n")[:MAX_RESULTS] == newest[:MAX_RESULTS]


async def test_a_listing_that_blocks_holds_its_walker_thread_never_the_event_loop(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attacker round 94: a killed rename, stuck in the kernel behind an ext4 truncate, held the
    workspace's directory for seconds; a Glob's first slice listed it on the event loop, which
    froze every caller. Every walk, however small, now lists in a walker thread."""
    reached = threading.Event()
    release = threading.Event()

    def held_at_the_first(index: int) -> None:
        if index == 0:
            reached.set()
            release.wait(60)

    (workspace / "held").mkdir()
    ctx = make_context(workspace)
    await run_tool(TOOL, {"pattern": "*"}, ctx)  # the workspace's filesystem is known by then
    FakeDirectory(workspace / "held", 3, ".txt", held_at_the_first).install(monkeypatch)
    threads = _spy_on_compiling(monkeypatch)
    task = asyncio.create_task(run_tool(TOOL, {"pattern": "held/*"}, ctx))
    try:
        assert await asyncio.to_thread(reached.wait, 60)
        assert not task.done(), "the listing ran on the event loop, which waited for it"
    finally:
        release.set()
    await task
    assert threads and threading.current_thread() not in threads


async def test_a_link_swapped_to_outside_while_it_is_followed_tells_nothing(
    workspace: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Round 71: a link was resolved inside, a directory on its way was then swapped for a link to
    # outside, and the stat that followed told the outside file's existence and mtime. Here the
    # swap comes between reading the link and following its target (the last step left).
    outside = tmp_path_factory.mktemp("outside").resolve()
    make(outside, "f", 2_000_000_000)
    (workspace / "A").mkdir()
    (workspace / "l").symlink_to(workspace / "A" / "f")  # absolute: read, then followed
    real_readlink = os.readlink

    def readlink(path: Any, **kwargs: Any) -> str:
        target = real_readlink(path, **kwargs)
        if target == str(workspace / "A" / "f") and not (workspace / "A.was").exists():
            (workspace / "A").rename(workspace / "A.was")
            (workspace / "A").symlink_to(outside)
        return target

    monkeypatch.setattr(os, "readlink", readlink)
    output = await run_tool(TOOL, {"pattern": "l"}, make_context(workspace))
    assert (workspace / "A").is_symlink(), "the swap did not happen"
    assert text_of(output) == "No files found"


@pytest.mark.parametrize(
    "target",
    [
        "/etc/hostname/../..{workspace}/a.py",  # outside, then back in: as text only
        "/proc/self/cwd/../..{workspace}/a.py",  # through a magic link
        "{up}{workspace}/a.py",  # up to / through the workspace's parents, then back in
        "{workspace}/src/missing/../../a.py",  # a path the kernel cannot walk
    ],
)
async def test_links_are_followed_by_the_kernel_beneath_the_workspace_only(
    tree: Path, target: str
) -> None:
    # Round 72: realpath resolved these as text or through outside links: whether they were
    # listed told which outside paths were links, and another process's working directory.
    (tree / "lk").mkdir()
    up = "../" * len(tree.parts)  # from lk/ to / (one more than needed: / has no parent)
    (tree / "lk" / "x.py").symlink_to(target.format(workspace=tree, up=up[:-1]))
    output = await run_tool(TOOL, {"pattern": "lk/*.py"}, make_context(tree))
    assert text_of(output) == "No files found"


async def test_links_inside_the_workspace_are_listed_relative_or_absolute(tree: Path) -> None:
    (tree / "lk").mkdir()
    (tree / "lk" / "relative.py").symlink_to("../src/b.py")
    (tree / "lk" / "absolute.py").symlink_to(tree / "src" / "deep" / "er" / "c.py")
    output = await run_tool(TOOL, {"pattern": "lk/*.py"}, make_context(tree))
    assert text_of(output) == f"{tree}/lk/relative.py\n{tree}/lk/absolute.py"


async def test_chains_of_links_inside_the_workspace_are_followed_a_link_at_a_time(
    tree: Path,
) -> None:
    # Round 73: an absolute link to an absolute link, and a relative one to an absolute one,
    # were not listed though they lead to files of the workspace.
    (tree / "lk").mkdir()
    (tree / "lk" / "to_absolute").symlink_to(tree / "src" / "b.py")
    (tree / "lk" / "abs_to_abs.py").symlink_to(tree / "lk" / "to_absolute")
    (tree / "lk" / "rel_to_abs.py").symlink_to("to_absolute")
    (tree / "lk" / "loop_a.py").symlink_to(tree / "lk" / "loop_b.py")
    (tree / "lk" / "loop_b.py").symlink_to(tree / "lk" / "loop_a.py")
    (tree / "lk" / "out.py").symlink_to(tree / "lk" / "to_outside")
    (tree / "lk" / "to_outside").symlink_to("/etc/hostname")
    # Round 74: a trailing "/" or "/." asks for a directory; the kernel cannot open these.
    (tree / "lk" / "abs_slash.py").symlink_to(f"{tree}/src/b.py/")
    (tree / "lk" / "abs_dot.py").symlink_to(f"{tree}/src/b.py/.")
    (tree / "lk" / "rel_slash.py").symlink_to("to_absolute/")
    (tree / "lk" / "rel_dot.py").symlink_to("to_absolute/.")
    output = await run_tool(TOOL, {"pattern": "lk/*.py"}, make_context(tree))
    assert sorted(text_of(output).split("\n")) == [
        f"{tree}/lk/abs_to_abs.py",
        f"{tree}/lk/rel_to_abs.py",
    ]
