"""LS on real trees: the tree format, ignore, collapsed directories, symlinks, the cap."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from daemon.errors import ConfinementError, ToolError
from daemon.models import TextContent
from daemon.tools.ls import MAX_ENTRIES, LsTool
from tests.unit.conftest import CallTool
from tests.unit.fake_sandbox import make_context, run_summarized

TOOL = LsTool()


async def ls(call_tool: CallTool, path: Path | str, **extra: object) -> str:
    output = await call_tool(TOOL, {"path": str(path), **extra})
    assert not output.is_error
    return "".join(b.text for b in output.content if isinstance(b, TextContent))


def touch(root: Path, *rels: str) -> None:
    for rel in rels:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rel)


async def test_tree_is_sorted_with_directories_marked(call_tool: CallTool, workspace: Path) -> None:
    touch(workspace, "b.txt", "a/x.py", "a/sub/y.py", ".env", "c/z.md")
    (workspace / "empty").mkdir()
    assert await ls(call_tool, workspace) == "\n".join(
        [
            f"- {workspace}/",
            "  - .env",
            "  - a/",
            "    - sub/",
            "      - y.py",
            "    - x.py",
            "  - b.txt",
            "  - c/",
            "    - z.md",
            "  - empty/",
        ]
    )


async def test_ignore_patterns_match_names_and_relative_paths(
    call_tool: CallTool, workspace: Path
) -> None:
    touch(workspace, "keep.py", "drop.pyc", "build/out.o", "src/gen/g.py", "src/s.py")
    text = await ls(call_tool, workspace, ignore=["*.pyc", "build", "src/gen"])
    assert text == "\n".join([f"- {workspace}/", "  - keep.py", "  - src/", "    - s.py"])


async def test_bulky_directories_are_shown_but_not_entered(
    call_tool: CallTool, workspace: Path
) -> None:
    touch(workspace, "node_modules/left-pad/index.js", ".git/HEAD", "main.js")
    assert await ls(call_tool, workspace) == "\n".join(
        [
            f"- {workspace}/",
            "  - .git/ (not listed)",
            "  - main.js",
            "  - node_modules/ (not listed)",
        ]
    )
    direct = await ls(call_tool, workspace / "node_modules")
    assert "    - index.js" in direct.split("\n")


async def test_symlinks_are_shown_with_target_and_not_entered(
    call_tool: CallTool, workspace: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    outside = tmp_path_factory.mktemp("outside")
    touch(outside, "secret/key.pem")
    (workspace / "out").symlink_to(outside / "secret")
    text = await ls(call_tool, workspace)
    assert text == f"- {workspace}/\n  - out -> {outside}/secret"
    with pytest.raises(ConfinementError, match="outside the workspace"):
        await ls(call_tool, workspace / "out")


async def test_cap_keeps_the_shallow_levels(call_tool: CallTool, workspace: Path) -> None:
    touch(workspace, *(f"deep/f{i:04}.txt" for i in range(MAX_ENTRIES + 50)), "top.txt")
    lines = (await ls(call_tool, workspace)).split("\n")
    assert lines[:2] == [f"- {workspace}/", "  - deep/"]
    assert "  - top.txt" in lines
    assert len([line for line in lines if line.startswith("    - ")]) == MAX_ENTRIES - 2
    assert lines[-1].startswith(f"(Listing stopped after {MAX_ENTRIES} entries;")


async def test_empty_directory(call_tool: CallTool, workspace: Path) -> None:
    assert await ls(call_tool, workspace) == (
        f"- {workspace}/\n(The directory is empty or every entry was ignored.)"
    )


async def test_refusals(call_tool: CallTool, workspace: Path) -> None:
    touch(workspace, "file.txt")
    with pytest.raises(ToolError, match=r"is not a directory\. LS lists directories"):
        await ls(call_tool, workspace / "file.txt")
    with pytest.raises(ToolError, match="does not exist"):
        await ls(call_tool, workspace / "missing")
    with pytest.raises(ConfinementError, match="outside the workspace"):
        await ls(call_tool, f"{workspace}/..")


async def summary(workspace: Path, path: Path | str) -> str:
    _, text = await run_summarized(TOOL, {"path": str(path)}, make_context(workspace))
    return text


async def test_summary_counts_entries_in_the_workspace_relative_directory(
    workspace: Path,
) -> None:
    touch(workspace, "src/a.py", "src/b.py", "src/pkg/c.py", "README")
    assert await summary(workspace, workspace / "src") == "Listed 4 entries in src/"
    assert await summary(workspace, workspace / "src" / "pkg") == "Listed 1 entry in src/pkg/"
    assert await summary(workspace, workspace) == "Listed 6 entries in ./"
    touch(workspace, *(f"many/f{i:04}.txt" for i in range(MAX_ENTRIES + 5)))
    assert await summary(workspace, workspace / "many") == (
        f"Listed {MAX_ENTRIES} entries in many/ (stopped at {MAX_ENTRIES})"
    )
    assert await summary(workspace, workspace / "README") == (
        f"LS failed: {workspace / 'README'} is not a directory"
    )


async def test_a_huge_directory_is_read_only_in_part(
    call_tool: CallTool, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attacker round 77: LS read and sorted every entry of a directory of 1.8 million names,
    holding the interpreter's lock (every caller waited 3.3 s) and gigabytes of memory."""
    from daemon.tools import ls as ls_module

    monkeypatch.setattr(ls_module, "MAX_READ_PER_DIRECTORY", 50)
    big = workspace / "big"
    big.mkdir()
    for index in range(120):
        (big / f"f{index:04d}").touch()
    read: list[int] = []
    real = ls_module._entries

    def counting(fd: int) -> Any:
        entries, complete = real(fd)
        read.append(len(entries))
        return entries, complete

    monkeypatch.setattr(ls_module, "_entries", counting)
    text = await ls(call_tool, big)
    assert read == [50]
    assert "Listing stopped" in text and text.count("- f0") == 50
