"""Read: show a text file of the workspace with `cat -n` line numbers (or a small image).

Runs on the host, read-only. The file is opened through `open_confined`, so a symlink swapped in
after validation, a FIFO or a device file is refused on the descriptor itself. The whole file's
hash is recorded in the session even when only a window is shown: Write and Edit compare against
the whole file.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from daemon.errors import ToolError, ToolInputError
from daemon.host.confine import is_inside, open_confined, require_inside, resolve_path
from daemon.host.loop_safe import NeedsThread, read_cached
from daemon.host.pinned import PinnedDirectory
from daemon.host.threads import FILESYSTEM_THREADS
from daemon.images import MAX_IMAGE_BYTES, sniff_image
from daemon.models import ImageContent, TextContent
from daemon.sessions.session import file_sha256
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
from daemon.tools.notebook import (
    MAX_NOTEBOOK_BYTES,
    NotebookView,
    refuse_unbounded,
    view_notebook,
)
from daemon.tools.pdf import DEFAULT_PAGES, MAX_PAGES, PdfView, read_pdf, render_pdf
from daemon.tools.schema import LaxInt
from daemon.tools.summaries import failed, plural, shown_path

if TYPE_CHECKING:
    from daemon.sessions.session import Session

LINE_FORMAT = "{number:>6}\t{text}"
"""How Read prefixes each line: the number right-aligned in 6 columns, then a TAB (as `cat -n`)."""

LINE_FORMAT_DESCRIPTION = (
    "each line starts with its line number right-aligned in 6 columns followed by a tab "
    "character; the file's own text begins after that tab"
)
"""The prefix format in words, for the descriptions of tools that quote Read's output (Edit)."""

DEFAULT_LIMIT = 2000
"""Lines shown when no limit is given."""
MAX_LINE_CHARS = 2000
"""Longer lines are cut to this many characters."""
MAX_WHOLE_FILE_BYTES = 256 * 1024
"""Larger files need offset or limit."""
MAX_FILE_BYTES = 32 * 1024 * 1024
"""Larger files are not read at all (the whole file is held in memory to hash it)."""
SNIFF_BYTES = 8192
"""A NUL byte in this many leading bytes marks a file as binary."""
RESULT_BUDGET_CHARS = 50_000
"""Read's result budget: the default overall cap, so that Read stops on a whole line with a note
(the offset to continue from) before the daemon's generic cut would drop lines in the middle."""
INLINE_READ_BYTES = 64 * 1024
"""Files up to this size are read on the event loop; larger ones in a worker thread."""
_NOTE_RESERVE = 1000
"""Characters of the budget kept free for the notes after the numbered lines."""
_MAX_LINE_BYTES = 4 * MAX_LINE_CHARS + 4
"""Bytes of a line decoded at most: UTF-8 takes up to 4 bytes a character, so this prefix holds
more than MAX_LINE_CHARS whole characters (a character cut at its end lies past the cut)."""
_SEEK_BLOCK = 1 << 16
"""Bytes whose newlines are counted at once while looking for the first line of a window."""
_FEW_LINES = 16
"""Lines stepped over one by one at the end of that search (before, the span is halved)."""


_LINE_TEMPLATE = "%6d\t%s"
"""LINE_FORMAT for the % operator: formats a window's lines about twice as fast."""


def format_line(number: int, text: str) -> str:
    """One numbered output line, exactly as Read shows it (LINE_FORMAT)."""
    return _LINE_TEMPLATE % (number, text)


class ReadInput(ToolInput):
    """Input of Read."""

    file_path: ToolPath = Field(
        description="The file to read: an absolute path inside the workspace.",
    )
    offset: LaxInt | None = Field(
        default=None,
        ge=0,
        description="Line number to start at (1-based; 0 counts as 1). Give it to continue where "
        f"a result stopped, or with limit for files over {MAX_WHOLE_FILE_BYTES // 1024} KB.",
    )
    limit: LaxInt | None = Field(
        default=None,
        gt=0,
        description=f"How many lines to show (default {DEFAULT_LIMIT}). Give it with offset to "
        "read a large file in parts.",
    )
    pages: str | None = Field(
        default=None,
        max_length=20,
        description=f"PDF files only: the pages to read, one ('3') or a range ('1-5'), at most "
        f"{MAX_PAGES} at a time (default: the first {DEFAULT_PAGES}).",
    )


@dataclass(frozen=True)
class ReadResult:
    """What Read found; `render` turns it into text (or an image block)."""

    path: Path
    kind: Literal["text", "empty", "past_end", "image", "notebook", "pdf"]
    total_lines: int = 0
    """Lines in the whole file."""
    first_line: int = 1
    """Number of the first line shown (the effective offset)."""
    lines: tuple[str, ...] = ()
    """The lines shown, endings removed, long ones already cut."""
    cut_lines: tuple[int, ...] = ()
    """Numbers of the lines that were cut to MAX_LINE_CHARS."""
    stopped_for_budget: bool = False
    """Fewer lines than asked were shown so the result fits the tool's budget."""
    budget_chars: int = 0
    image: ImageContent | None = None
    notebook: NotebookView | None = None
    pdf: PdfView | None = None
    shown: str = ""
    """The path as people read it (relative to the workspace), for the summary."""


_SHOWS_THE_FILE = frozenset({"text", "empty", "notebook"})
"""Results that show the file's own text (an image or a PDF's extracted text do not, nor does an
offset past the end): only those let Edit and Write change the file afterwards."""


class _TooLargeInline(Exception):
    """The opened file is larger than the event loop reads (it grew, or was swapped in, since
    its size was looked up): the read is done again in a worker thread."""


ReadAt = Callable[[int, int, int], bytes]
"""How a descriptor is read: (fd, size, offset) -> bytes (os.pread, or the event loop's
`read_cached`)."""


def _load(fd: int, path: Path, size: int, read_at: ReadAt, *, inline: bool) -> tuple[bytes, int]:
    """Read the whole descriptor (`size` bytes by fstat, read at once: no second copy from
    joining chunks); returns the bytes and the mtime after reading. With `inline`, a file that
    grows past INLINE_READ_BYTES meanwhile raises _TooLargeInline."""
    chunks = [read_at(fd, size + 1, 0)] if size else []
    total = len(chunks[0]) if chunks else 0
    while chunk := read_at(fd, 1 << 20, total):  # short reads, or a file still growing
        chunks.append(chunk)
        total += len(chunk)
        if inline and total > INLINE_READ_BYTES:
            raise _TooLargeInline
        if total > MAX_FILE_BYTES:
            raise ToolError(
                f"{path} grew past {MAX_FILE_BYTES} bytes while it was being read; use Grep to "
                "find the lines you need."
            )
    data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    return data, os.fstat(fd).st_mtime_ns


def _count_lines(data: bytes) -> int:
    if not data:
        return 0
    return data.count(b"\n") + (0 if data.endswith(b"\n") else 1)


def _line_start(data: bytes, line: int) -> int:
    """Offset of 0-based line `line` (which exists), found without splitting the file: newlines
    are counted block by block in C, and only the last block is searched line by line."""
    position = 0
    left = line
    while left:
        end = position + _SEEK_BLOCK
        count = data.count(b"\n", position, end)
        if count >= left:
            break
        left -= count
        position = end
    # The line starts in [position, end): halve that span (in C) until few lines are left.
    while left > _FEW_LINES:
        middle = (position + end) // 2
        count = data.count(b"\n", position, middle)
        if count >= left:
            end = middle
        else:
            left -= count
            position = middle
    for _ in range(left):
        position = data.index(b"\n", position) + 1
    return position


def _line_text(data: bytes, start: int, end: int) -> tuple[str, bool]:
    """Line data[start:end] (its newline excluded) as text, and whether it was cut. Only a
    bounded prefix is ever decoded: a line of many megabytes costs no more than a short one."""
    if end - start > _MAX_LINE_BYTES:
        text = data[start : start + _MAX_LINE_BYTES].decode("utf-8", errors="replace")
    else:
        if end > start and data[end - 1] == 0x0D:  # the CR of a CRLF ending
            end -= 1
        text = data[start:end].decode("utf-8", errors="replace")
    if len(text) > MAX_LINE_CHARS:
        return text[:MAX_LINE_CHARS], True
    return text, False


def _whole_window(
    data: bytes, position: int, start: int, count: int, total: int, budget: int
) -> tuple[str, ...] | None:
    """The window's lines decoded at once, in the common case where none is cut and all fit the
    budget; None otherwise (the line by line loop below then finds where to cut and stop). The
    same text as that loop: a newline is never part of a UTF-8 sequence, so decoding the whole
    window replaces exactly what decoding each line would. Nothing larger than the budget is
    ever copied."""
    stop = _line_start(data, start + count) if start + count < total else len(data)
    if stop - position > budget or start + count > 999_999:
        return None  # more bytes than the budget has characters, or wider numbers
    chunk = data[position:stop]
    if chunk.endswith(b"\n"):
        chunk = chunk[:-1]
    if max(map(len, chunk.split(b"\n"))) > MAX_LINE_CHARS:
        return None  # a line that may be too long
    lines = chunk.decode("utf-8", errors="replace").split("\n")
    if len(lines) != count:
        return None
    if b"\r" in chunk:
        lines = [line[:-1] if line.endswith("\r") else line for line in lines]
    # Each shown line: six digits, a tab, the text and its newline (format_line).
    if sum(map(len, lines)) + 8 * count > budget:
        return None
    return tuple(lines)


def _window(
    path: Path, data: bytes, offset: int | None, limit: int | None, budget: int
) -> ReadResult:
    total = _count_lines(data)
    if total == 0:
        return ReadResult(path=path, kind="empty")
    first = max(offset or 1, 1)
    if first > total:
        return ReadResult(path=path, kind="past_end", total_lines=total, first_line=first)
    start = first - 1
    count = min(limit if limit is not None else DEFAULT_LIMIT, total - start)
    position = _line_start(data, start)
    whole = _whole_window(data, position, start, count, total, budget)
    if whole is not None:
        return ReadResult(
            path=path,
            kind="text",
            total_lines=total,
            first_line=first,
            lines=whole,
            budget_chars=budget,
        )
    lines: list[str] = []
    cut: list[int] = []
    used = 0
    stopped = False
    # The budget ends the loop after at most a few thousand lines, whatever limit was asked.
    for index in range(start, start + count):
        end = data.find(b"\n", position)
        if end == -1:
            end = len(data)
        text, was_cut = _line_text(data, position, end)
        position = end + 1
        used += len(format_line(index + 1, text)) + 1
        if used > budget and lines:
            stopped = True
            break
        lines.append(text)
        if was_cut:
            cut.append(index + 1)
    return ReadResult(
        path=path,
        kind="text",
        total_lines=total,
        first_line=first,
        lines=tuple(lines),
        cut_lines=tuple(cut),
        stopped_for_budget=stopped,
        budget_chars=budget,
    )


def _read_file(
    root: PinnedDirectory,
    path: Path,
    offset: int | None,
    limit: int | None,
    budget: int,
    *,
    inline: bool = False,
) -> tuple[ReadResult, bytes, int]:
    """Blocking part of Read: open confined, classify, load, cut the window. With `inline` (on
    the event loop), a file larger than INLINE_READ_BYTES (by the opened descriptor) raises
    _TooLargeInline, one the event loop may not open NeedsThread (`open_confined`)."""
    try:
        fd = open_confined(root, path, on_loop=inline)
    except FileNotFoundError as exc:
        raise ToolError(
            f"{path} does not exist. Check the path (Glob or LS can find the right one; names are "
            "case-sensitive)."
        ) from exc
    except IsADirectoryError as exc:
        raise ToolError(
            f"{path} is a directory, not a file. Use LS to list it or Glob to find files in it."
        ) from exc
    except PermissionError as exc:
        raise ToolError(f"{path} cannot be read: permission denied.") from exc
    except OSError as exc:
        raise ToolError(f"{path} cannot be read: {exc.strerror or exc}.") from exc
    try:
        size = os.fstat(fd).st_size
        if inline and size > INLINE_READ_BYTES:
            raise _TooLargeInline
        if size > MAX_FILE_BYTES:
            raise ToolError(
                f"{path} is {size} bytes, more than the {MAX_FILE_BYTES} bytes Read can open even "
                "in parts. Use Grep to find the lines you need, or Bash (e.g. `sed -n '100,200p'`)."
            )
        # On the event loop, only what the page cache holds (or tmpfs): a miss is read again in
        # a thread (a disk, or a loop device's backing file, may take any time).
        read_at: ReadAt = (
            functools.partial(read_cached, in_memory=root.in_memory) if inline else os.pread
        )
        head = read_at(fd, SNIFF_BYTES, 0)
        media_type = sniff_image(head)
        if media_type is not None:
            if size > MAX_IMAGE_BYTES:
                raise ToolError(
                    f"{path} is an image of {size} bytes, larger than the {MAX_IMAGE_BYTES} bytes "
                    "Read can return. Resize it (e.g. with Bash) and read the smaller copy."
                )
            data, mtime_ns = _load(fd, path, size, read_at, inline=inline)
            image = ImageContent(media_type=media_type, data=data)
            return ReadResult(path=path, kind="image", image=image), data, mtime_ns
        if head.startswith(b"%PDF-"):
            data, mtime_ns = _load(fd, path, size, read_at, inline=inline)
            return ReadResult(path=path, kind="pdf"), data, mtime_ns
        if b"\x00" in head:
            raise ToolError(
                f"{path} is a binary file (it contains NUL bytes), and Read shows text only. "
                "Inspect it with Bash (e.g. `file`, `xxd | head`) if you need to."
            )
        # A notebook is shown cell by cell, not by lines: its JSON may be larger (images).
        notebook = path.suffix == ".ipynb" and offset is None and limit is None
        if offset is None and limit is None and size > MAX_WHOLE_FILE_BYTES and not notebook:
            raise ToolError(
                f"{path} is {size} bytes, more than the {MAX_WHOLE_FILE_BYTES} bytes Read shows "
                "at once. Call Read again with offset and limit to read it in parts, or use Grep "
                "to find the lines you need."
            )
        if notebook:
            refuse_unbounded(path, size)
        data, mtime_ns = _load(fd, path, size, read_at, inline=inline)
    finally:
        os.close(fd)
    if notebook:
        refuse_unbounded(path, len(data), data)
    view = view_notebook(data) if notebook else None
    if view is not None:
        return ReadResult(path=path, kind="notebook", notebook=view), data, mtime_ns
    if size > MAX_WHOLE_FILE_BYTES and offset is None and limit is None:
        raise ToolError(
            f"{path} is {size} bytes and not a notebook Read can show; call Read again with "
            "offset and limit to read it in parts."
        )
    return _window(path, data, offset, limit, budget), data, mtime_ns


class ReadTool(Tool[ReadInput, ReadResult]):
    """Read a text file (or a small image) from the workspace."""

    name = "Read"
    description = (
        "Reads a text file of the workspace and returns it with line numbers, like `cat -n`; "
        "PNG, JPEG, GIF and WebP images come back as images; a Jupyter notebook (.ipynb, read "
        "without offset and limit) comes back cell by cell, each with its id, type, source and "
        f"outputs, images as images; a PDF comes back as the text of its pages (pages: '3' or "
        f"'1-5', at most {MAX_PAGES} at a time; the first {DEFAULT_PAGES} by default).\n"
        "- file_path must be an absolute path inside the workspace.\n"
        f"- In the output {LINE_FORMAT_DESCRIPTION}. That prefix is not part of the file: leave "
        "it out of Edit's old_string.\n"
        f"- Limits: up to {DEFAULT_LIMIT} lines from the start by default (use offset, a "
        "1-based line number, and limit to read other parts); lines longer than "
        f"{MAX_LINE_CHARS} characters are cut; files over {MAX_WHOLE_FILE_BYTES // 1024} KB "
        f"must be read in parts with offset and limit (notebooks up to {MAX_NOTEBOOK_BYTES >> 20} "
        f"MB are shown whole), files over {MAX_FILE_BYTES >> 20} MB not at all (use Grep); a "
        f"result stops before about {RESULT_BUDGET_CHARS} characters "
        "with a note saying which offset to continue from.\n"
        "- Read a file before you change it with Edit, MultiEdit or Write: they refuse a file "
        "that was not Read in this session, or that changed since.\n"
        "- Directories (use LS or Glob), binary files, device files and FIFOs are refused; an "
        "empty file or an offset past the end gets a short warning instead of content.\n"
        "- To find which file contains something use Grep; to find files by name use Glob. "
        "Several Read calls can run in parallel."
    )
    input_model = ReadInput
    keeps_over_budget = False
    traits = ToolTraits(
        read_only=True,
        destructive=False,
        concurrency_safe=True,
        sandboxed=False,
        interrupt=InterruptBehavior.CANCEL,
        max_result_chars=RESULT_BUDGET_CHARS,
    )

    def analyse(self, args: ReadInput, session: Session) -> CallFacts:
        path = resolve_path(args.file_path, "file_path", session.root)
        kept = session.kept_outputs
        if kept is not None and is_inside(kept, path) and path != kept:
            touched = TouchedPath(path, "read", False, "file_path", kept_output=True)
            return self.facts(paths=[touched])
        return self.facts(paths=[TouchedPath.of(session.workspace, path, "read", "file_path")])

    async def call(self, args: ReadInput, ctx: CallContext) -> ReadResult:
        touched = next(p for p in ctx.facts.paths if p.field == "file_path")
        if touched.kept_output and ctx.session.kept_outputs is not None:
            return await self._read_kept(args, touched.path, ctx.session.kept_outputs)
        # Resolved when the call was prepared; the descriptor is checked again when the file is
        # opened, so a path swapped since then is still caught (open_confined).
        path = require_inside(ctx.workspace, touched.path, args.file_path)
        budget = self.traits.max_result_chars - _NOTE_RESERVE
        root = ctx.session.pinned_root()
        digest: str | None = None
        try:
            # A small file of a local workspace, from the kernel's caches: a worker thread would
            # cost more than the read itself (daemon.host.loop_safe).
            result, data, mtime_ns = _read_file(
                root, path, args.offset, args.limit, budget, inline=True
            )
        except (_TooLargeInline, NeedsThread):
            # Reading, hashing and parsing megabytes take milliseconds each, and a filesystem
            # that is not local may take any time: off the event loop.
            result, data, mtime_ns, digest = await FILESYSTEM_THREADS.run(
                ctx.session.owner,
                functools.partial(_read_and_digest, root, path, args.offset, args.limit, budget),
            )
        shown = shown_path(path, ctx.workspace)
        if result.kind == "pdf":
            pdf = await read_pdf(data, args.pages, str(path), ctx.session.owner)
            result = replace(result, pdf=pdf)
        elif args.pages is not None:
            raise ToolInputError(f"pages applies to PDF files only, and {path} is not one.")
        if result.kind in _SHOWS_THE_FILE:
            # What Edit and Write require: the file as the model was shown it.
            ctx.session.record_read(path, data, mtime_ns, digest)
        return replace(result, shown=shown)

    async def _read_kept(self, args: ReadInput, path: Path, folder: Path) -> ReadResult:
        """A kept output, opened beneath the session's folder of them (written by the daemon
        alone); it is not a workspace file, so no read is recorded for it."""
        budget = self.traits.max_result_chars - _NOTE_RESERVE

        def read() -> ReadResult:
            try:
                root = PinnedDirectory.pin(folder)
            except OSError as exc:
                raise ToolError(
                    f"{path} is no longer kept (its session's outputs were removed)."
                ) from exc
            try:
                return _read_file(root, path, args.offset, args.limit, budget)[0]
            finally:
                root.close()

        result = await asyncio.to_thread(read)
        if result.kind == "pdf":  # the daemon keeps text only: this one is not a real PDF
            raise ToolError(f"{path} starts like a PDF but is a kept text output; use offset.")
        return replace(result, shown=str(path))

    def render(self, result: ReadResult) -> ToolOutput:
        return _render(result)

    def summarize(self, args: ReadInput, result: ReadResult | None, output: ToolOutput) -> str:
        if result is None:
            return failed(self.name, output)
        where = result.shown or args.file_path
        if result.kind == "image":
            media = result.image.media_type.removeprefix("image/") if result.image else "image"
            return f"Read {media.upper()} image {where}"
        if result.kind == "empty":
            return f"Read {where}: the file is empty"
        if result.kind == "notebook" and result.notebook is not None:
            return f"Read notebook {where} ({plural(result.notebook.cells, 'cell')})"
        if result.kind == "pdf" and result.pdf is not None:
            pdf = result.pdf
            if not pdf.pages:
                return f"Read PDF {where} (no pages)"
            first, last = pdf.pages[0].number, pdf.pages[-1].number
            return f"Read PDF {where} (pages {first}-{last} of {pdf.total_pages})"
        if result.kind == "past_end":
            return (
                f"Read {where}: offset {result.first_line} is past its end "
                f"({plural(result.total_lines, 'line')})"
            )
        shown = len(result.lines)
        text = f"Read {plural(shown, 'line')} of {where}"
        last = result.first_line + shown - 1
        if result.first_line > 1 or last < result.total_lines:
            text += f" (lines {result.first_line}-{last} of {result.total_lines})"
        return text


def _read_and_digest(
    root: PinnedDirectory, path: Path, offset: int | None, limit: int | None, budget: int
) -> tuple[ReadResult, bytes, int, str]:
    result, data, mtime_ns = _read_file(root, path, offset, limit, budget)
    return result, data, mtime_ns, file_sha256(data)


def _render(result: ReadResult) -> ToolOutput:
    if result.kind == "image" and result.image is not None:
        return ToolOutput(content=[result.image], keep="head")
    if result.kind == "notebook" and result.notebook is not None:
        view = result.notebook
        return ToolOutput(content=[TextContent(text=view.text), *view.images], keep="head")
    if result.kind == "pdf" and result.pdf is not None:
        return ToolOutput(content=[TextContent(text=render_pdf(result.pdf, str(result.path)))])
    if result.kind == "empty":
        return ToolOutput.text(f"Warning: {result.path} exists but is empty (0 bytes).")
    if result.kind == "past_end":
        unit = "line" if result.total_lines == 1 else "lines"
        return ToolOutput.text(
            f"Warning: {result.path} has {result.total_lines} {unit}, so offset "
            f"{result.first_line} is past its end. Use an offset from 1 to "
            f"{result.total_lines}."
        )
    first = result.first_line
    numbers = range(first, first + len(result.lines))
    notes = _notes(result)
    body = "\n".join(map(_LINE_TEMPLATE.__mod__, zip(numbers, result.lines, strict=True)))
    if notes:
        body += "\n\n" + "\n".join(notes)
    # Over budget, head and tail both survive: the tail carries the "continue at offset" note.
    return ToolOutput(content=[TextContent(text=body)])


def _notes(result: ReadResult) -> list[str]:
    notes: list[str] = []
    if result.cut_lines:
        shown = ", ".join(str(n) for n in result.cut_lines[:10])
        more = len(result.cut_lines) - 10
        if more > 0:
            shown += f" and {more} more"
        if len(result.cut_lines) == 1:
            notes.append(
                f"(Line {shown} is longer than {MAX_LINE_CHARS} characters and is shown cut to "
                f"its first {MAX_LINE_CHARS}.)"
            )
        else:
            notes.append(
                f"(Lines {shown} are longer than {MAX_LINE_CHARS} characters and are shown cut "
                f"to their first {MAX_LINE_CHARS}.)"
            )
    last = result.first_line + len(result.lines) - 1
    if last < result.total_lines:
        why = (
            f" (stopped there to stay within {result.budget_chars} characters)"
            if result.stopped_for_budget
            else ""
        )
        notes.append(
            f"(Showing lines {result.first_line}-{last} of {result.total_lines}{why}. Call Read "
            f"with offset={last + 1} to read on.)"
        )
    return notes
