"""Pure string-edit logic shared by Edit and MultiEdit: find, count, replace, keep line endings.

No I/O happens here. The tools read the file on the host, decide the new text with these functions
and hand it to the sandbox to write, so every rule below can be unit-tested on plain strings.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from daemon.errors import ToolError
from daemon.tools.read import MAX_LINE_CHARS
from daemon.tools.read import format_line as format_read_line

CRLF = "\r\n"

#: Lines of unchanged text shown around an edit in the result snippet.
SNIPPET_CONTEXT_LINES = 4
#: A snippet never shows more lines than this (a huge new_string is summarised).
SNIPPET_MAX_LINES = 40

# Read's prefix: a right-aligned line number padded to 6 columns, then a TAB.
_READ_PREFIX = re.compile(r"^ *\d+\t")


class EditError(ToolError):
    """An edit cannot be applied; the message says why and what to do instead."""


@dataclass(frozen=True)
class EditSpec:
    """One replacement as the model asked for it."""

    old_string: str
    """Exact text to find; empty means "create the file with new_string"."""
    new_string: str
    """Text that replaces it."""
    replace_all: bool = False
    """Replace every occurrence instead of requiring exactly one."""


@dataclass(frozen=True)
class Applied:
    """The outcome of applying one edit to a text."""

    text: str
    """The whole text after the edit."""
    replacements: int
    """How many occurrences were replaced."""
    start: int
    """Offset in `text` where the first replacement begins (for the snippet)."""
    length: int
    """Length of the first replacement's new text."""


def decode_text(data: bytes, path: object) -> str:
    """Decode a file for editing; only UTF-8 text can be edited (binary files are refused)."""
    if b"\x00" in data:
        raise EditError(
            f"{path} looks like a binary file (it contains NUL bytes); only UTF-8 text files can "
            "be edited. Use the Bash tool with a suitable program to change binary files."
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EditError(
            f"{path} is not valid UTF-8 text (invalid byte at offset {exc.start}); only UTF-8 text "
            "files can be edited. Convert it first (e.g. with iconv in the Bash tool) or use Bash."
        ) from exc


def check_changes_something(edit: EditSpec) -> None:
    """old_string equal to new_string is refused: the edit would be a no-op."""
    if edit.old_string == edit.new_string:
        raise EditError(
            "old_string and new_string are identical, so this edit would change nothing. Give a "
            "new_string that differs from old_string."
        )


def check_empty_old_string(text: str, edit: EditSpec) -> None:
    """An empty old_string may only fill a file that is empty (or whitespace only)."""
    if edit.old_string == "" and text.strip():
        raise EditError(
            "old_string is empty but the file already has content. An empty old_string can only "
            "create a new file (or fill an empty one). To replace the whole file use the Write "
            "tool; otherwise give the exact text to replace as old_string."
        )


def apply_edit(text: str, edit: EditSpec) -> Applied:
    """Apply one edit to `text` or raise EditError saying why it cannot be applied.

    When the file uses CRLF line endings and the strings use LF (models nearly always send LF),
    the strings are matched and inserted in the file's own convention, so the file keeps its line
    endings. Regions that really use the strings' convention still match as given.
    """
    check_changes_something(edit)
    check_empty_old_string(text, edit)
    if edit.old_string == "":
        return Applied(text=edit.new_string, replacements=1, start=0, length=len(edit.new_string))
    for old, new in _line_ending_forms(text, edit.old_string, edit.new_string):
        count = text.count(old)
        if count == 0:
            continue
        if count > 1 and not edit.replace_all:
            raise EditError(
                f"old_string was found {count} times in the file, but replace_all is false. Add "
                "more surrounding lines to old_string so that it matches exactly one place, or "
                f"set replace_all to true to replace all {count} occurrences."
            )
        start = text.index(old)
        limit = -1 if edit.replace_all else 1
        return Applied(
            text=text.replace(old, new, limit),
            replacements=count if edit.replace_all else 1,
            start=start,
            length=len(new),
        )
    raise EditError(_not_found_message(edit.old_string))


def apply_edits(text: str, edits: Sequence[EditSpec]) -> tuple[str, list[Applied]]:
    """Apply edits in order, each to the previous one's result; all or nothing.

    The error of the first failing edit names its 1-based index; since the caller only writes
    the final text, a failure leaves the file untouched.
    """
    steps: list[Applied] = []
    for index, edit in enumerate(edits, start=1):
        try:
            step = apply_edit(text, edit)
        except EditError as exc:
            raise numbered_failure(index, len(edits), exc) from exc
        steps.append(step)
        text = step.text
    return text, steps


def numbered_failure(index: int, total: int, exc: EditError) -> EditError:
    """The error of edit `index` of `total`, saying that none of the edits were applied."""
    return EditError(
        f"Edit {index} of {total} failed: {exc} None of the edits were applied; the file is "
        f"unchanged. Fix edit {index} and send all the edits again."
    )


def numbered_snippet(text: str, start: int, length: int) -> str:
    """Lines around text[start:start+length], numbered like Read output (`cat -n`)."""
    if not text:
        return ""
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()  # the empty string after the last newline is not a line
    first = text.count("\n", 0, start)
    # The region's own final newline does not start another line of it.
    last = text.count("\n", 0, max(start, start + length - 1))
    low = max(0, first - SNIPPET_CONTEXT_LINES)
    high = min(len(lines), last + SNIPPET_CONTEXT_LINES + 1)
    hidden = max(0, high - low - SNIPPET_MAX_LINES)
    shown = range(low, high - hidden)
    rendered = [format_line(number + 1, lines[number]) for number in shown]
    if hidden:
        rendered.append(f"... ({hidden} more lines not shown)")
    return "\n".join(rendered)


def format_line(number: int, line: str) -> str:
    """One line exactly as Read shows it (CR of a CRLF ending dropped, long lines cut)."""
    line = line.removesuffix("\r")
    if len(line) > MAX_LINE_CHARS:
        line = line[:MAX_LINE_CHARS] + " [line cut]"
    return format_read_line(number, line)


def _to_crlf(value: str) -> str:
    return value.replace(CRLF, "\n").replace("\n", CRLF)


def _to_lf(value: str) -> str:
    return value.replace(CRLF, "\n")


def _line_ending_forms(text: str, old: str, new: str) -> list[tuple[str, str]]:
    """(old, new) pairs to try, the file's own line-ending convention first."""
    convert = _to_crlf if CRLF in text else _to_lf
    preferred = (convert(old), convert(new))
    return [preferred] if preferred == (old, new) else [preferred, (old, new)]


def _not_found_message(old_string: str) -> str:
    message = (
        "old_string was not found in the file. It must match the file's text exactly, "
        "including whitespace, indentation and line breaks. The line-number prefix that Read "
        "shows (a right-aligned 6-column number and a TAB) is not part of the file: leave it out."
    )
    lines = [line for line in old_string.split("\n") if line]
    if lines and all(_READ_PREFIX.match(line) for line in lines):
        message += " Your old_string seems to start its lines with such a prefix."
    return message + " Read the file again and copy the exact text."
