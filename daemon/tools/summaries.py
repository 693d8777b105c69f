"""One-line summaries of tool calls for the people watching (never what the model reads).

`Tool.summarize` gets the input, the tool's own result and the rendered output; a summary speaks in
the result's terms ("Read 120 lines of src/app.py"), and when the call failed before it had a
result it quotes the error's first sentence, shortened for the messages people see most ("Edit
failed: old_string not found").
"""

from __future__ import annotations

import re
from pathlib import Path

from daemon.host.confine import is_inside
from daemon.models import TextContent
from daemon.tools.contract import ToolOutput

#: Long error sentences people see often, and how a summary says them.
_SHORT_REASONS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^old_string was not found\b"), "old_string not found"),
    (
        re.compile(r"^old_string was found (\d+) times\b"),
        r"old_string found \1 times (replace_all is false)",
    ),
    (re.compile(r"^old_string is empty but the file already has content"), "file not empty"),
    (re.compile(r"\bhas not been read in this session"), "file not Read first"),
    (re.compile(r"\bhas been modified since it was last read"), "file changed since it was Read"),
    (re.compile(r"\bchanged since it was read\b"), "file changed since it was Read"),
    (re.compile(r"\bis outside the workspace\b"), "path outside the workspace"),
    (re.compile(r"\bdoes not exist\b"), "no such file or directory"),
    (re.compile(r"^The sandbox is not available\b"), "no sandbox available"),
    (re.compile(r"^The sandbox could not run\b"), "the sandbox could not run it"),
)
_NUMBERED = re.compile(r"^Edit (\d+) of (\d+) failed: (.*)$", re.DOTALL)
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s")


def shown_path(path: Path, workspace: Path, *, directory: bool = False) -> str:
    """A path as people read it: relative to the workspace when inside it, else absolute."""
    suffix = "/" if directory else ""
    if path == workspace:
        return "./" if directory else "."
    if is_inside(workspace, path):
        root = str(workspace)
        return str(path)[len(root) + (root != "/") :] + suffix
    return str(path) + suffix


def one_line(text: str, limit: int = 60) -> str:
    """`text` on one line, cut to `limit` characters with an ellipsis."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def quoted(text: str, limit: int = 40) -> str:
    """`text` in single quotes, exactly (spaces kept, line breaks shown as \\n), cut to `limit`."""
    exact = text.replace("\n", "\\n").replace("\t", "\\t")
    return "'" + (exact if len(exact) <= limit else exact[: limit - 1] + "…") + "'"


def count_lines(text: str) -> int:
    """Lines of a text (a last line without a newline counts)."""
    if not text:
        return 0
    return text.count("\n") + (0 if text.endswith("\n") else 1)


def plural(count: int, noun: str, nouns: str = "") -> str:
    """`count` with its noun, singular or plural ("1 file", "3 files", "2 entries")."""
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"


def text_of(output: ToolOutput) -> str:
    """All text of an output."""
    return "".join(block.text for block in output.content if isinstance(block, TextContent))


def reason(text: str, limit: int = 120) -> str:
    """Why a call failed, in a few words: the first sentence of its error, shortened."""
    prefix = ""
    numbered = _NUMBERED.match(text.strip())
    if numbered:
        prefix = f"edit {numbered[1]} of {numbered[2]}: "
        text = numbered[3]
    line = text.strip().split("\n", 1)[0]
    for pattern, short in _SHORT_REASONS:
        found = pattern.search(line)
        if found:
            return prefix + found.expand(short)
    first = _SENTENCE_END.split(line, maxsplit=1)[0].rstrip(".;:")
    return one_line(prefix + first, limit)


def failed(tool_name: str, output: ToolOutput) -> str:
    """The summary of a call that ended in an error result."""
    return f"{tool_name} failed: {reason(text_of(output)) or 'no reason given'}"


def seconds(duration_ms: int) -> str:
    """A duration for people: "0.4 s", "12 s", "2 min 5 s"."""
    if duration_ms < 9_950:
        return f"{duration_ms / 1000:.1f} s"
    whole = round(duration_ms / 1000)
    if whole < 60:
        return f"{whole} s"
    minutes, rest = divmod(whole, 60)
    return f"{minutes} min {rest} s" if rest else f"{minutes} min"
