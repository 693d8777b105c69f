"""MultiEdit: several exact string replacements in one file, applied all together or not at all."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import ClassVar

from pydantic import Field

from daemon.errors import ToolInputError
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
from daemon.tools.files.edit import (
    NEW_STRING_DESCRIPTION,
    OLD_STRING_DESCRIPTION,
    REPLACE_ALL_DESCRIPTION,
    file_missing,
)
from daemon.tools.files.edits import (
    EditError,
    EditSpec,
    apply_edits,
    check_changes_something,
    decode_text,
    numbered_failure,
)
from daemon.tools.summaries import failed, plural


class EditOperation(ToolInput):
    """One replacement of a MultiEdit."""

    old_string: str = Field(description=OLD_STRING_DESCRIPTION)
    new_string: str = Field(description=NEW_STRING_DESCRIPTION)
    replace_all: bool = Field(default=False, description=REPLACE_ALL_DESCRIPTION)


class MultiEditInput(ToolInput):
    """Input of MultiEdit."""

    file_path: ToolPath = Field(description=FILE_PATH_DESCRIPTION)
    edits: list[EditOperation] = Field(
        min_length=1,
        description="The replacements (at least one), applied in this order; each one sees the "
        "result of the ones before it.",
    )


class MultiEditTool(Tool[MultiEditInput, FileChange]):
    """Several replacements in one file, atomically."""

    name: ClassVar[str] = "MultiEdit"
    description: ClassVar[str] = (
        "Makes several exact string replacements in one file in a single call. Use it instead "
        "of several Edit calls when you change one file in more than one place.\n"
        "- file_path must be an absolute path inside the workspace.\n"
        "- Each edit follows Edit's rules: old_string must match the file exactly (whitespace "
        "and indentation included, without Read's line-number prefix) and occur exactly once "
        "unless replace_all is true; old_string and new_string must differ.\n"
        "- Edits are applied in order, each to the result of the previous ones, so an earlier "
        "edit can change the text a later one must match: plan for it.\n"
        "- All or nothing: if any edit fails, none is applied and the error names the failing "
        "edit's number (counting from 1).\n"
        "- Read the file in this session first; it must not have changed since.\n"
        "- To create a file, give a path that does not exist and a first edit with an empty "
        "old_string (its new_string becomes the content); later edits apply to that content.\n"
        f"- Limit: only UTF-8 text files up to {MAX_FILE_MB} MB (use Bash for others). Line "
        "endings (LF or CRLF) are kept. The write happens atomically inside a sandbox."
    )
    input_model: ClassVar[type[ToolInput]] = MultiEditInput
    traits: ClassVar[ToolTraits] = FILE_TOOL_TRAITS

    def validate(self, args: MultiEditInput, session: Session) -> MultiEditInput:
        specs = _specs(args)
        for index, spec in enumerate(specs, start=1):
            try:
                check_changes_something(spec)
            except EditError as exc:
                raise ToolInputError(str(numbered_failure(index, len(specs), exc))) from exc
        return args

    def analyse(self, args: MultiEditInput, session: Session) -> CallFacts:
        return file_facts(self, args.file_path, session)

    async def call(self, args: MultiEditInput, ctx: CallContext) -> FileChange:
        ctx.require_sandbox()
        path = ctx.facts.path("file_path")
        specs = _specs(args)
        current = await read_current(ctx.session, path, args.file_path)
        if current is None:
            if specs[0].old_string:
                raise file_missing(path)
            text, expected = "", None
        else:
            # In worker threads, like Edit: the work grows with the file.
            text = await asyncio.to_thread(decode_text, current, path)
            expected = await require_fresh(ctx, path, current, self.name)
        size = 0 if current is None else len(current)
        new_text, steps = await asyncio.to_thread(apply_edits, text, specs, size)
        change = await write_file(ctx, path, new_text, expected)
        return replace(
            change, edits=len(steps), replacements=sum(step.replacements for step in steps)
        )

    def render(self, result: FileChange) -> ToolOutput:
        edits = f"{result.edits} edit" + ("" if result.edits == 1 else "s")
        if result.created:
            return render_change(result, f"File created successfully at: {result.path} ({edits}).")
        return render_change(
            result,
            f"Applied {edits} to {result.path} ({result.replacements} replacement"
            + ("" if result.replacements == 1 else "s")
            + " in total).",
        )

    def summarize(self, args: MultiEditInput, result: FileChange | None, output: ToolOutput) -> str:
        change = succeeded(result)
        if change is None:
            return failed(self.name, output)
        edits = plural(change.edits, "edit")
        if change.created:
            return f"Created {change.shown} with {edits}"
        return f"Edited {change.shown} ({edits}, {plural(change.replacements, 'replacement')})"


def _specs(args: MultiEditInput) -> list[EditSpec]:
    return [EditSpec(op.old_string, op.new_string, op.replace_all) for op in args.edits]
