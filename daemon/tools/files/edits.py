"""Pure string-edit logic shared by Edit and MultiEdit: find, count, replace, keep line endings.

No I/O happens here. The tools read the file on the host, decide the new text with these functions
and hand it to the sandbox to write, so every rule below can be unit-tested on plain strings.

Every edit is bounded before it is made: the size its result would have is worked out from the
number of occurrences and the strings' lengths, and an edit over MAX_EDITED_BYTES is refused
without building anything (a replace_all of a long new_string over a file of many occurrences
would otherwise build gigabytes). The snippet shown afterwards looks only at its own lines.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from daemon.errors import ToolError
from daemon.tools.read import MAX_FILE_BYTES, MAX_LINE_CHARS
from daemon.tools.read import format_line as format_read_line

CRLF = "\r\n"

#: Lines of unchanged text shown around an edit in the result snippet.
SNIPPET_CONTEXT_LINES = 4
#: A snippet never shows more lines than this (a huge new_string is summarised).
SNIPPET_MAX_LINES = 40
#: The largest text an edit may produce, in UTF-8 bytes: the largest file the tools accept.
MAX_EDITED_BYTES = MAX_FILE_BYTES

# Read's prefix: a right-aligned line number padded to 6 columns, then a TAB.
_READ_PREFIX = re.compile(r"^ *\d+\t")
_SHOWN = MAX_LINE_CHARS + 2
"""Characters of a line a snippet looks at: two past the cut, enough to tell a line that is cut
from one that only ends in the CR of a CRLF."""


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
    size: int
    """UTF-8 bytes of `text`."""


def utf8_size(text: str) -> int:
    """Bytes of `text` in UTF-8 (without encoding it when it is ASCII: a flag check)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


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


def apply_edit(
    text: str, edit: EditSpec, size: int | None = None, max_bytes: int = MAX_EDITED_BYTES
) -> Applied:
    """Apply one edit to `text` (`size` UTF-8 bytes; worked out when not given) or raise
    EditError saying why it cannot be applied, or that its result would exceed `max_bytes`.

    When the file uses CRLF line endings and the strings use LF (models nearly always send LF),
    the strings are matched and inserted in the file's own convention, so the file keeps its line
    endings. Regions that really use the strings' convention still match as given.
    """
    check_changes_something(edit)
    check_empty_old_string(text, edit)
    if edit.old_string == "":
        new_size = utf8_size(edit.new_string)
        _check_size(new_size, max_bytes, 1)
        return Applied(edit.new_string, 1, 0, len(edit.new_string), new_size)
    size = utf8_size(text) if size is None else size
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
        # Checked before the new text exists: it is only built once it is known to fit.
        new_size = size + count * (utf8_size(new) - utf8_size(old))
        _check_size(new_size, max_bytes, count)
        return Applied(
            text=text.replace(old, new, -1 if edit.replace_all else 1),
            replacements=count,
            start=text.index(old),
            length=len(new),
            size=new_size,
        )
    raise EditError(_not_found_message(edit.old_string))


def apply_edits(
    text: str,
    edits: Sequence[EditSpec],
    size: int | None = None,
    max_bytes: int = MAX_EDITED_BYTES,
) -> tuple[str, list[Applied]]:
    """Apply edits in order, each to the previous one's result; all or nothing.

    The error of the first failing edit names its 1-based index; since the caller only writes
    the final text, a failure leaves the file untouched. Each step's result is bounded by
    `max_bytes` before it is built.
    """
    steps: list[Applied] = []
    for index, edit in enumerate(edits, start=1):
        try:
            step = apply_edit(text, edit, size, max_bytes)
        except EditError as exc:
            raise numbered_failure(index, len(edits), exc) from exc
        steps.append(step)
        text, size = step.text, step.size
    return text, steps


def _check_size(new_size: int, max_bytes: int, count: int) -> None:
    if new_size <= max_bytes:
        return
    what = f"Replacing all {count} occurrences" if count > 1 else "This edit"
    raise EditError(
        f"{what} would make the file {new_size} bytes, more than the {max_bytes} bytes the file "
        "tools handle; nothing was changed. "
        + (
            "Replace fewer occurrences per call, or make a change this large with Bash."
            if count > 1
            else "Make a change this large with Bash."
        )
    )


def numbered_failure(index: int, total: int, exc: EditError) -> EditError:
    """The error of edit `index` of `total`, saying that none of the edits were applied."""
    return EditError(
        f"Edit {index} of {total} failed: {exc} None of the edits were applied; the file is "
        f"unchanged. Fix edit {index} and send all the edits again."
    )


def numbered_snippet(text: str, start: int, length: int) -> str:
    """Lines around text[start:start+length], numbered like Read output (`cat -n`).

    Only the lines shown are cut out of the text (lines are counted, not split), and of a very
    long line only what is shown: the cost does not grow with the file or the replacement.
    """
    if not text:
        return ""
    total = text.count("\n") + (0 if text.endswith("\n") else 1)
    first = text.count("\n", 0, start)
    # The region's own final newline does not start another line of it.
    last = first + text.count("\n", start, max(start, start + length - 1))
    low = max(0, first - SNIPPET_CONTEXT_LINES)
    high = min(total, last + SNIPPET_CONTEXT_LINES + 1)
    hidden = max(0, high - low - SNIPPET_MAX_LINES)
    position = text.rfind("\n", 0, start) + 1  # where line `first` begins
    for _ in range(first - low):
        position = text.rfind("\n", 0, position - 1) + 1
    rendered: list[str] = []
    for number in range(low, high - hidden):
        end = text.find("\n", position)
        end = len(text) if end == -1 else end
        rendered.append(format_line(number + 1, text[position : min(end, position + _SHOWN)]))
        position = end + 1
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
