"""Edit: replace an exact string in a file (or create a file), written inside the sandbox."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

from pydantic import Field

from daemon.errors import ToolError, ToolInputError
from daemon.sessions.session import Session
from daemon.tools.contract import (
    CallContext,
    CallFacts,
    Tool,
    ToolInput,
    ToolOutput,
    ToolPath,
    ToolTraits,
)
from daemon.tools.files.change import (
    FILE_PATH_DESCRIPTION,
    FILE_TOOL_TRAITS,
    MAX_FILE_MB,
    FileChange,
    file_facts,
    read_current,
    render_change,
    require_fresh,
    succeeded,
    write_file,
)
from daemon.tools.files.edits import (
    Applied,
    EditError,
    EditSpec,
    apply_edit,
    check_changes_something,
    check_empty_old_string,
    decode_text,
    numbered_snippet,
)
from daemon.tools.read import LINE_FORMAT_DESCRIPTION
from daemon.tools.summaries import count_lines, failed, plural

OLD_STRING_DESCRIPTION = (
    "The exact text to replace, copied from the file with all whitespace and indentation, "
    "without Read's line-number prefix (the number and the TAB are not part of the file). Empty "
    "only to create a new file."
)
NEW_STRING_DESCRIPTION = "The text to put in its place (must differ from old_string)."
REPLACE_ALL_DESCRIPTION = (
    "Replace every occurrence of old_string (e.g. to rename a variable). When false (the "
    "default), old_string must occur exactly once."
)


def file_missing(path: Path) -> ToolError:
    """The error for editing a file that does not exist."""
    return ToolError(
        f"{path} does not exist. To create it, use the Write tool (or an edit whose old_string is "
        "empty); otherwise check the path (Glob can find the file)."
    )


class EditInput(ToolInput):
    """Input of Edit."""

    file_path: ToolPath = Field(description=FILE_PATH_DESCRIPTION)
    old_string: str = Field(description=OLD_STRING_DESCRIPTION)
    new_string: str = Field(description=NEW_STRING_DESCRIPTION)
    replace_all: bool = Field(default=False, description=REPLACE_ALL_DESCRIPTION)


class EditTool(Tool[EditInput, FileChange]):
    """Exact string replacement in one file."""

    name: ClassVar[str] = "Edit"
    description: ClassVar[str] = (
        "Replaces an exact string in a file with another string.\n"
        "- file_path must be an absolute path inside the workspace.\n"
        "- Read the file in this session before editing it; an edit of a file that was not Read, "
        "or that changed since it was Read, fails and asks you to Read it (again).\n"
        "- old_string must match the file exactly, including whitespace, indentation and line "
        f"breaks. In Read's output {LINE_FORMAT_DESCRIPTION}. That prefix is not part of the "
        "file: never put it in old_string.\n"
        "- old_string must occur exactly once: include enough surrounding lines to make it "
        "unique, or set replace_all to true to replace every occurrence (e.g. to rename).\n"
        "- An empty old_string creates a new file containing new_string; for an existing file "
        "use Write to replace everything.\n"
        "- The file's line endings (LF or CRLF) are kept. Limit: only UTF-8 text files up to "
        f"{MAX_FILE_MB} MB can be edited (use Bash for others).\n"
        "- Prefer Edit over Write for changes to existing files; for several changes to one file "
        "use MultiEdit. The write happens atomically inside a sandbox."
    )
    input_model: ClassVar[type[ToolInput]] = EditInput
    traits: ClassVar[ToolTraits] = FILE_TOOL_TRAITS

    def validate(self, args: EditInput, session: Session) -> EditInput:
        try:
            check_changes_something(_spec(args))
        except EditError as exc:
            raise ToolInputError(str(exc)) from exc
        return args

    def analyse(self, args: EditInput, session: Session) -> CallFacts:
        return file_facts(self, args.file_path, session)

    async def call(self, args: EditInput, ctx: CallContext) -> FileChange:
        ctx.require_sandbox()
        path = ctx.facts.path("file_path")
        spec = _spec(args)
        current = await read_current(ctx.session, path, args.file_path)
        if current is None:
            if args.old_string:
                raise file_missing(path)
            created = apply_edit("", spec)  # only its size is checked: the text is new_string
            change = await write_file(ctx, path, created.text, None)
            return replace(change, replacements=1)
        # Decoding, replacing and the snippet take time in proportion to the file (up to its
        # limit): worker threads do them, so other calls' turns on the event loop do not wait.
        # The order of the checks is the contract: an empty old_string on a file with content is
        # refused before read-state is looked at, "not found" only after it.
        text = await asyncio.to_thread(_editable, current, path, spec)
        expected = await require_fresh(ctx, path, current, self.name)
        applied, snippet = await asyncio.to_thread(_edited, text, spec, len(current))
        change = await write_file(ctx, path, applied.text, expected)
        return replace(change, snippet=snippet, replacements=applied.replacements)

    def render(self, result: FileChange) -> ToolOutput:
        if result.created:
            return render_change(result, f"File created successfully at: {result.path}")
        if not result.snippet:
            return render_change(
                result, f"The file {result.path} has been updated; it is now empty."
            )
        what = "has been updated"
        where = "a snippet of the edited file"
        if result.replacements > 1:
            what = f"has been updated: all {result.replacements} occurrences were replaced"
            where = "the region of the first replacement"
        return render_change(
            result,
            f"The file {result.path} {what}. Here is the result of running `cat -n` on {where}:\n"
            f"{result.snippet}",
        )

    def summarize(self, args: EditInput, result: FileChange | None, output: ToolOutput) -> str:
        change = succeeded(result)
        if change is None:
            return failed(self.name, output)
        if change.created:
            return f"Created {change.shown} ({plural(count_lines(args.new_string), 'line')})"
        return f"Edited {change.shown} ({plural(change.replacements, 'replacement')})"


def _spec(args: EditInput) -> EditSpec:
    return EditSpec(args.old_string, args.new_string, args.replace_all)


def _editable(current: bytes, path: Path, spec: EditSpec) -> str:
    """The file's text; refused when it is not UTF-8 text, or has content an empty old_string
    would replace."""
    text = decode_text(current, path)
    check_empty_old_string(text, spec)
    return text


def _edited(text: str, spec: EditSpec, size: int) -> tuple[Applied, str]:
    """The edit applied (refused before it is built when too large), and its snippet."""
    applied = apply_edit(text, spec, size)
    return applied, numbered_snippet(applied.text, applied.start, applied.length)
