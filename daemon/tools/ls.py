"""LS: show a directory of the workspace as a tree, shallow levels first.

The listing is breadth-first, so when it hits its entry cap the model still sees the top of the
tree rather than the inside of the first deep directory. Every directory is reopened from the root
one component at a time with O_NOFOLLOW, so the walk cannot be redirected out of the workspace by a
symlink, and symlinks are shown (with their target) but never entered.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import stat
from collections import deque
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from daemon.errors import ToolError
from daemon.host.confine import mode_beneath, open_confined, require_inside, resolve_path
from daemon.host.pinned import PinnedDirectory
from daemon.host.threads import FILESYSTEM_THREADS
from daemon.models import TextContent
from daemon.tools.contract import (
    CallContext,
    CallFacts,
    InterruptBehavior,
    Tool,
    ToolInput,
    ToolOutput,
    ToolPath,
    ToolTraits,
    TouchedPath,
)
from daemon.tools.glob.engine import open_child_dir
from daemon.tools.summaries import failed, plural, shown_path

if TYPE_CHECKING:
    from daemon.sessions.session import Session

MAX_ENTRIES = 1000
"""Entries listed; the listing stops there with a note."""
MAX_READ_PER_DIRECTORY = 10 * MAX_ENTRIES
"""Entries read from one directory (sorted by name, then shown up to MAX_ENTRIES in all); the
listing stops after a directory that has more."""
NOT_EXPANDED = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "node_modules",
        "__pycache__",
        ".venv",
        "venv",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".tox",
    }
)
"""Directories shown but not entered (unless LS is pointed at them): bulky and rarely useful."""


class LsInput(ToolInput):
    """Input of LS."""

    path: ToolPath = Field(
        description="The directory to list: an absolute path inside the workspace.",
    )
    ignore: list[str] | None = Field(
        default=None,
        description='Glob patterns of entries to leave out, e.g. ["*.pyc", "build"], each matched '
        "against an entry's name and against its path relative to path.",
    )


@dataclass
class LsNode:
    """One entry of the tree."""

    name: str
    kind: Literal["dir", "file", "symlink", "other"]
    link_target: str = ""
    children: list[LsNode] = field(default_factory=list)
    collapsed: bool = False
    """A directory shown but deliberately not entered (see NOT_EXPANDED)."""
    unreadable: bool = False


@dataclass(frozen=True)
class LsResult:
    """The tree under the listed directory."""

    root: Path
    tree: LsNode
    count: int
    """Entries listed."""
    truncated: bool
    """The listing stopped at MAX_ENTRIES."""
    shown: str = ""
    """The directory as people read it (relative to the workspace), for the summary."""


def _ignored(patterns: tuple[str, ...], name: str, rel: str) -> bool:
    return any(
        fnmatch.fnmatchcase(name, pattern) or fnmatch.fnmatchcase(rel, pattern.rstrip("/"))
        for pattern in patterns
    )


def _open_chain(root_fd: int, parts: tuple[str, ...]) -> int | None:
    fd = root_fd
    for part in parts:
        child = open_child_dir(fd, part)
        if fd != root_fd:
            os.close(fd)
        if child is None:
            return None
        fd = child
    return fd


def _entries(
    fd: int,
) -> tuple[list[tuple[str, Literal["dir", "file", "symlink", "other"], str]], bool]:
    """(name, kind, symlink target) of the directory's entries, read while the listing's
    descriptor is open, sorted by name; and whether that was all of them. At most
    MAX_READ_PER_DIRECTORY are read: a directory of millions took seconds to sort and gigabytes
    to hold, with the interpreter's lock held all along, so every caller waited (round 77)."""
    found: list[tuple[str, Literal["dir", "file", "symlink", "other"], str]] = []
    complete = True
    with os.scandir(fd) as listing:
        for entry in listing:
            if len(found) >= MAX_READ_PER_DIRECTORY:
                complete = False
                break
            try:
                if entry.is_symlink():
                    found.append((entry.name, "symlink", os.readlink(entry.name, dir_fd=fd)))
                elif entry.is_dir(follow_symlinks=False):
                    found.append((entry.name, "dir", ""))
                elif entry.is_file(follow_symlinks=False):
                    found.append((entry.name, "file", ""))
                else:
                    found.append((entry.name, "other", ""))
            except OSError:
                continue
    found.sort(key=lambda item: item[0])
    return found, complete


def _list(pinned: PinnedDirectory, root: Path, raw: str, ignore: tuple[str, ...]) -> LsResult:
    mode = mode_beneath(pinned, root)
    if mode is not None and not stat.S_ISDIR(mode):
        raise ToolError(f"{raw} is not a directory. LS lists directories; use Read for a file.")
    try:
        root_fd = open_confined(pinned, root, directory=True)
    except FileNotFoundError as exc:
        raise ToolError(
            f"Directory {raw} does not exist. Check the path (LS the parent directory to see what "
            "is there)."
        ) from exc
    except PermissionError as exc:
        raise ToolError(f"Directory {raw} cannot be read: permission denied.") from exc
    tree = LsNode(name=str(root), kind="dir")
    queue: deque[tuple[LsNode, tuple[str, ...]]] = deque([(tree, ())])
    count = 0
    truncated = False
    try:
        while queue and not truncated:
            node, parts = queue.popleft()
            fd = _open_chain(root_fd, parts) if parts else root_fd
            if fd is None:
                node.unreadable = True
                continue
            try:
                entries, complete = _entries(fd)
                truncated = truncated or not complete
            except OSError:
                node.unreadable = True
                continue
            finally:
                if fd != root_fd:
                    os.close(fd)
            for name, kind, target in entries:
                rel = "/".join((*parts, name))
                if _ignored(ignore, name, rel):
                    continue
                if count >= MAX_ENTRIES:
                    truncated = True
                    break
                count += 1
                child = LsNode(name=name, kind=kind, link_target=target)
                node.children.append(child)
                if kind == "dir":
                    if name in NOT_EXPANDED:
                        child.collapsed = True
                    else:
                        queue.append((child, (*parts, name)))
    finally:
        os.close(root_fd)
    return LsResult(root=root, tree=tree, count=count, truncated=truncated)


def _label(node: LsNode) -> str:
    if node.kind == "dir":
        label = node.name.rstrip("/") + "/"
        if node.collapsed:
            label += " (not listed)"
        if node.unreadable:
            label += " (cannot be read)"
        return label
    if node.kind == "symlink":
        return f"{node.name} -> {node.link_target}"
    return node.name


def render_tree(tree: LsNode) -> list[str]:
    """The tree as indented `- name` lines (iterative: deep trees cannot exhaust the stack)."""
    lines: list[str] = []
    stack: list[tuple[LsNode, int]] = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        lines.append(f"{'  ' * depth}- {_label(node)}")
        stack.extend((child, depth + 1) for child in reversed(node.children))
    return lines


class LsTool(Tool[LsInput, LsResult]):
    """List a directory as a tree."""

    name = "LS"
    description = (
        "Lists the files and directories under a directory of the workspace as an indented tree, "
        "shallow levels first.\n"
        "- path must be an absolute path inside the workspace, naming a directory.\n"
        "- Directories end with '/'; symbolic links show their target and are not entered. "
        "Bulky directories (.git, node_modules, __pycache__, .venv and similar) are shown but not "
        "entered unless you LS them directly. ignore leaves out entries matching glob patterns.\n"
        f"- Limit: the listing stops after {MAX_ENTRIES} entries with a note; LS a "
        "subdirectory to see more.\n"
        "- To find files by name anywhere in the tree, Glob is better; to search contents, use "
        "Grep; to see a file, use Read. Several LS calls can run in parallel."
    )
    input_model = LsInput
    traits = ToolTraits(
        read_only=True,
        destructive=False,
        concurrency_safe=True,
        sandboxed=False,
        interrupt=InterruptBehavior.CANCEL,
        max_result_chars=100_000,
    )

    def analyse(self, args: LsInput, session: Session) -> CallFacts:
        path = resolve_path(args.path, "path", session.root)
        return self.facts(paths=[TouchedPath.of(session.workspace, path, "read", "path")])

    async def call(self, args: LsInput, ctx: CallContext) -> LsResult:
        root = require_inside(ctx.workspace, ctx.facts.path("path"), args.path)
        ignore = tuple(args.ignore or ())
        listing = functools.partial(_list, ctx.session.pinned_root(), root, args.path, ignore)
        result = await FILESYSTEM_THREADS.run(ctx.session.owner, listing)
        return replace(result, shown=shown_path(root, ctx.workspace, directory=True))

    def render(self, result: LsResult) -> ToolOutput:
        lines = render_tree(result.tree)
        if result.count == 0:
            lines.append("(The directory is empty or every entry was ignored.)")
        if result.truncated:
            lines.append(
                f"(Listing stopped after {MAX_ENTRIES} entries; directories shown without "
                "contents past that point were not read. LS a subdirectory, or use Glob, to see "
                "more.)"
            )
        return ToolOutput(content=[TextContent(text="\n".join(lines))], keep="head")

    def summarize(self, args: LsInput, result: LsResult | None, output: ToolOutput) -> str:
        if result is None:
            return failed(self.name, output)
        text = f"Listed {plural(result.count, 'entry', 'entries')} in {result.shown or args.path}"
        return text + f" (stopped at {MAX_ENTRIES})" if result.truncated else text
