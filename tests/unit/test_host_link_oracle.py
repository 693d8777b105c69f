"""The daemon (root, often) never looks at a path by its host name after the call was judged:
a folder swapped for a link meanwhile would have it answer about files outside the workspace.

Attacker round 115 swapped `L` between a folder and a link to /root while a tenant wrote
`L/<name>` again and again, and told from the answers which names /root holds (Write, Edit,
MultiEdit, NotebookEdit: the check before a new file). Glob and LS looked the same way. Each test
puts the workspace in the state the swap leaves (`L` a link to a folder outside) and checks that
what is outside changes nothing in the answer.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from daemon.errors import ToolError
from daemon.host.confine import realpath_within
from daemon.host.pinned import PinnedDirectory
from daemon.tools.files.change import _read_confined
from daemon.tools.glob.engine import GlobPlan, Walk, glob_files
from daemon.tools.ls import _list


@pytest.fixture
def swapped(tmp_path: Path) -> Iterator[tuple[PinnedDirectory, Path, Path]]:
    """A pinned workspace whose `L` leads to a folder outside, and that folder."""
    workspace, outside = tmp_path / "ws", tmp_path / "outside"
    workspace.mkdir()
    outside.mkdir()
    (outside / "a-file").write_text("secret")
    (outside / "a-folder").mkdir()
    (workspace / "L").symlink_to(outside)
    root = PinnedDirectory.pin(workspace.resolve())
    try:
        yield root, workspace.resolve() / "L", outside
    finally:
        root.close()


def answer(action: Callable[[], object]) -> str:
    """What the caller learns: the result's kind, or the error's text."""
    try:
        result = action()
    except (ToolError, OSError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return f"answered {type(result).__name__}"


def same_for_every_name(swapped_root: Path, action: Callable[[Path], object]) -> None:
    answers = {
        name: answer(lambda n=name: action(swapped_root / n))  # type: ignore[misc]
        for name in ("a-file", "a-folder", "missing")
    }
    named = {text.replace(str(swapped_root), "<L>") for text in answers.values()}
    for name in ("a-file", "a-folder", "missing"):
        named = {text.replace(name, "<name>") for text in named}
    assert len(named) == 1, answers


def test_a_write_check_never_tells_what_is_beyond_a_link(
    swapped: tuple[PinnedDirectory, Path, Path],
) -> None:
    root, link, _ = swapped
    same_for_every_name(link, lambda path: _read_confined(root, path))
    same_for_every_name(link, lambda path: _read_confined(root, path / "below"))


def test_glob_never_tells_what_is_beyond_a_link(
    swapped: tuple[PinnedDirectory, Path, Path],
) -> None:
    root, link, _ = swapped

    def glob(base: Path) -> object:
        plan = GlobPlan(base=base, raw_base=str(base), patterns=(("*",),))
        return glob_files(root, plan, Walk(deadline=time.monotonic() + 10, clock=time.monotonic))

    same_for_every_name(link, glob)


def test_ls_never_tells_what_is_beyond_a_link(
    swapped: tuple[PinnedDirectory, Path, Path],
) -> None:
    root, link, _ = swapped
    same_for_every_name(link, lambda path: _list(root, path, str(path), ()))


def test_resolving_a_path_follows_links_as_realpath_while_inside(tmp_path: Path) -> None:
    ws = (tmp_path / "ws").resolve()
    (ws / "a" / "b").mkdir(parents=True)
    (ws / "f").write_text("x")
    (ws / "rel").symlink_to("a/b")
    (ws / "abs").symlink_to(ws / "a")
    (ws / "a" / "up").symlink_to("..")
    (ws / "chain").symlink_to("rel")
    for written in (
        "a/b/c",
        "rel/c",
        "abs/b",
        "a/up/rel/x/y",
        "chain/../f",
        "missing/../a/up/chain",
        "f/under/a/file",
        "a/../../ws/rel",
        ".",
    ):
        path = ws / written
        assert realpath_within(path, ws) == Path(os.path.realpath(path)), written


def test_resolving_a_path_never_follows_a_folder_swapped_for_a_link_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attacker round 116 (lead): a folder `L` found to be no link, then swapped for a link to
    /proc/self/fd, had the next name's link read through it, by its host path: its target, one
    of the daemon's open files (another tenant's workspace), became part of the path the policy
    saw and named in its answers."""
    ws = (tmp_path / "ws").resolve()
    (ws / "L").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x").symlink_to("/secret/target")
    read = os.readlink
    swapped: list[bool] = []

    def swapping(path: object, *args: object, **kwargs: object) -> str:
        try:
            return read(path, *args, **kwargs)  # type: ignore[call-overload,no-any-return]
        finally:
            if not swapped and str(path).endswith("L"):
                swapped.append(True)
                (ws / "L").rename(ws / "L.old")
                (ws / "L").symlink_to(outside)

    monkeypatch.setattr(os, "readlink", swapping)
    try:
        resolved = str(realpath_within(ws / "L" / "x" / "y", ws))
    except OSError:
        resolved = "not known"
    assert swapped and "secret" not in resolved, resolved
