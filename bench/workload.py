"""What the benchmark works on: the workspace files and the tool inputs the clients send."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

#: Owner of the workspace when the benchmark runs as root: the sandbox runs commands as the
#: workspace's owner and refuses nothing here, but a root-owned workspace is not how it is used.
WORKSPACE_OWNER = (1000, 1000)
ONE_KB_FILE = "one_kb.txt"
TREE_DIR = "tree"
FILES_PER_DIR = 100
#: Every Grep of the batch part looks for one of these; each is in one file of every 500.
NEEDLES = tuple(f"needle_{k}_marker" for k in range(10))
_NEEDLE_EVERY = 500
#: The read-only mix, in the order each client cycles through it (equal shares).
READONLY_MIX = ("Read", "Glob", "Grep")
SESSION_FILES = 24


def make_workspace(root: Path) -> Path:
    """The default session's workspace, with the 1 KB file the decision part reads."""
    workspace = root / "ws"
    workspace.mkdir()
    line = "x" * 63 + "\n"
    (workspace / ONE_KB_FILE).write_text(line * 16)  # 16 lines of 64 bytes: exactly 1 KiB
    if os.geteuid() == 0:
        os.chown(workspace, *WORKSPACE_OWNER)
        os.chown(workspace / ONE_KB_FILE, *WORKSPACE_OWNER)
    return workspace


def _source_text(index: int) -> str:
    """About 1 KB of plausible source code; unique per file so nothing dedupes it."""
    body = [f'"""Module {index}: generated for the tooljail benchmark."""', "", "import os", ""]
    for fn in range(6):
        body += [
            f"def handle_{index}_{fn}(request, limit={fn + 10}):",
            f"    total = sum(range(limit)) + {index * 7 + fn}",
            "    return {'path': os.fspath(request), 'total': total}",
            "",
        ]
    return "\n".join(body) + "\n"


def make_tree(workspace: Path, files: int) -> Path:
    """`files` source files in folders of FILES_PER_DIR; each needle is in one of every 500."""
    tree = workspace / TREE_DIR
    for index in range(files):
        folder = tree / f"pkg{index // FILES_PER_DIR:04d}"
        if index % FILES_PER_DIR == 0:
            folder.mkdir(parents=True)
        text = _source_text(index)
        slot = index % _NEEDLE_EVERY
        if slot % (_NEEDLE_EVERY // len(NEEDLES)) == 0:
            text += f"# {NEEDLES[slot // (_NEEDLE_EVERY // len(NEEDLES))]}\n"
        (folder / f"mod_{index:05d}.py").write_text(text)
    return tree


def populate_session(workspace: Path) -> list[Path]:
    """A small project in a session's workspace: what the read-only clients read and search."""
    paths = []
    for index in range(SESSION_FILES):
        folder = workspace / f"src{index % 3}"
        folder.mkdir(exist_ok=True)
        path = folder / f"module_{index:02d}.py"
        path.write_text(_source_text(index))
        paths.append(path)
    return paths


def read_input(path: Path) -> dict[str, Any]:
    """Read of a whole file."""
    return {"file_path": str(path)}


def glob_input(workspace: Path) -> dict[str, Any]:
    """Every Python file of the workspace."""
    return {"pattern": "**/*.py", "path": str(workspace)}


def grep_input(path: Path, pattern: str) -> dict[str, Any]:
    """Files matching a pattern (the default output mode)."""
    return {"pattern": pattern, "path": str(path)}


def bash_input(command: str, timeout_ms: int = 120_000) -> dict[str, Any]:
    """A Bash command with a timeout."""
    return {"command": command, "timeout": timeout_ms}
