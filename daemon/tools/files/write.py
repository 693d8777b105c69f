"""Write: create or overwrite a file, written atomically inside the sandbox."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from daemon.errors import ToolError
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
from daemon.tools.files.edits import MAX_EDITED_BYTES, utf8_size
from daemon.tools.summaries import count_lines, failed, plural


class WriteInput(ToolInput):
    """Input of Write."""

    file_path: ToolPath = Field(
        description="The file to create or overwrite: an absolute path inside the workspace.",
    )
    content: str = Field(description="The complete new content of the file (replaces all of it).")


class WriteTool(Tool[WriteInput, FileChange]):
    """Create a file, or overwrite one that was Read in this session."""

    name: ClassVar[str] = "Write"
    description: ClassVar[str] = (
        "Writes a file to the workspace: creates it (with any missing parent directories) or "
        "replaces its whole content.\n"
        "- file_path must be an absolute path inside the workspace.\n"
        "- Overwriting an existing file requires that you Read it earlier in this session and "
        "that it has not changed since; otherwise the call fails and asks you to Read it (again).\n"
        "- To change part of an existing file, prefer Edit (or MultiEdit): it sends only the "
        "change and cannot drop content by accident. Use Write for new files or complete "
        "rewrites.\n"
        f"- Limit: an existing file over {MAX_FILE_MB} MB cannot be replaced with Write (use "
        "Bash).\n"
        "- The write happens inside a sandbox and is atomic: the file is never left half "
        "written."
    )
    input_model: ClassVar[type[ToolInput]] = WriteInput
    traits: ClassVar[ToolTraits] = FILE_TOOL_TRAITS

    def analyse(self, args: WriteInput, session: Session) -> CallFacts:
        return file_facts(self, args.file_path, session)

    async def call(self, args: WriteInput, ctx: CallContext) -> FileChange:
        ctx.require_sandbox()
        path = ctx.facts.path("file_path")
        # The request size caps content already, unless an operator raised it past the limit.
        size = utf8_size(args.content)
        if size > MAX_EDITED_BYTES:
            raise ToolError(
                f"The content is {size} bytes, more than the {MAX_EDITED_BYTES} bytes the file "
                "tools handle; nothing was written. Create a file this large with Bash."
            )
        current = await read_current(ctx.session, path, args.file_path)
        expected = None if current is None else await require_fresh(ctx, path, current, self.name)
        return await write_file(ctx, path, args.content, expected)

    def render(self, result: FileChange) -> ToolOutput:
        if result.created:
            return render_change(result, f"File created successfully at: {result.path}")
        return render_change(result, f"The file {result.path} has been updated.")

    def summarize(self, args: WriteInput, result: FileChange | None, output: ToolOutput) -> str:
        change = succeeded(result)
        if change is None:
            return failed(self.name, output)
        text = f"Wrote {plural(count_lines(args.content), 'line')} to {change.shown}"
        return text + " (new file)" if change.created else text
