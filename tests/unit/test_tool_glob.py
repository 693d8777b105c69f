"""Glob on generated trees: matching rules, mtime order, the cap, confinement."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon.errors import ConfinementError, ToolError, ToolInputError
from daemon.models import TextContent
from daemon.tools.glob.engine import MAX_RESULTS, PROGRESS_EVERY, expand_braces
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
