"""NotebookEdit: replace, insert or delete one cell of a Jupyter notebook, as the reference does.

Cells are named as Read shows them (their own id, or cell-N by position). The notebook must have
been Read in this session and not changed since; the new JSON is written atomically in the
sandbox like any file change. Replacing a code cell's source clears its outputs and execution
count (they belonged to the old source).
"""

from __future__ import annotations

import asyncio
import json
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

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
    FILE_TOOL_TRAITS,
    FileChange,
    file_facts,
    read_current,
    render_change,
    require_fresh,
    succeeded,
    write_file,
)
from daemon.tools.files.edits import MAX_EDITED_BYTES
from daemon.tools.notebook import cell_id, nesting_depth, refuse_unbounded
from daemon.tools.summaries import failed

EditMode = Literal["replace", "insert", "delete"]


class NotebookEditInput(ToolInput):
    """Input of NotebookEdit."""

    notebook_path: ToolPath = Field(
        description="The notebook to change: an absolute path to a .ipynb file in the workspace.",
    )
    cell_id: str | None = Field(
        default=None,
        description="The cell, by the id Read shows (its own id, or cell-N). With "
        "edit_mode=insert the new cell goes after it (first, without a cell_id).",
    )
    new_source: str = Field(description="The cell's new source (empty to delete).")
    cell_type: Literal["code", "markdown"] | None = Field(
        default=None,
        description="The cell's type: required to insert; to replace, the current type is kept "
        "unless given.",
    )
    edit_mode: EditMode = Field(
        default="replace",
        description="Replace the cell's source (the default), insert a new cell, or delete it.",
    )


@dataclass(frozen=True)
class NotebookChange:
    """What the edit did."""

    change: FileChange
    mode: EditMode
    cell: str
    """The id of the cell replaced, inserted or deleted."""
    cell_type: str


class NotebookEditTool(Tool[NotebookEditInput, NotebookChange]):
    """One cell of a Jupyter notebook."""

    name: ClassVar[str] = "NotebookEdit"
    description: ClassVar[str] = (
        "Replaces, inserts or deletes one cell of a Jupyter notebook (.ipynb).\n"
        "- notebook_path must be an absolute path inside the workspace; Read the notebook in "
        "this session first (Read shows each cell with its id).\n"
        "- cell_id names the cell as Read shows it. edit_mode=replace (default) sets its source "
        "(a code cell's outputs are cleared); edit_mode=insert adds a cell of cell_type after "
        "cell_id (at the start without one); edit_mode=delete removes the cell.\n"
        "- Use Edit for other files, and for text inside a cell Edit can also work on the JSON."
    )
    input_model: ClassVar[type[ToolInput]] = NotebookEditInput
    traits: ClassVar[ToolTraits] = FILE_TOOL_TRAITS

    def validate(self, args: NotebookEditInput, session: Session) -> NotebookEditInput:
        if not args.notebook_path.endswith(".ipynb"):
            raise ToolInputError(
                "notebook_path must be a Jupyter notebook (.ipynb); use Edit or Write for other "
                "files."
            )
        if args.edit_mode == "insert" and args.cell_type is None:
            raise ToolInputError(
                "cell_type is required to insert a cell: give 'code' or 'markdown'."
            )
        if args.edit_mode != "insert" and not args.cell_id:
            raise ToolInputError(
                f"cell_id is required to {args.edit_mode} a cell: give the id Read shows for it."
            )
        return args

    def analyse(self, args: NotebookEditInput, session: Session) -> CallFacts:
        return file_facts(self, args.notebook_path, session, "notebook_path")

    async def call(self, args: NotebookEditInput, ctx: CallContext) -> NotebookChange:
        ctx.require_sandbox()
        path = ctx.facts.path("notebook_path")
        current = await read_current(ctx.session, path, args.notebook_path)
        if current is None:
            raise ToolError(
                f"{path} does not exist. NotebookEdit changes existing notebooks; create one with "
                "Write (its JSON) first."
            )
        expected = await require_fresh(ctx, path, current, self.name)
        refuse_unbounded(path, len(current), current)
        text, cell, kind = await asyncio.to_thread(_edited, current, path, args)
        change = await write_file(ctx, path, text, expected)
        return NotebookChange(change, args.edit_mode, cell, kind)

    def render(self, result: NotebookChange) -> ToolOutput:
        done = {
            "replace": f"Updated cell {result.cell} ({result.cell_type})",
            "insert": f"Inserted a new {result.cell_type} cell with id {result.cell}",
            "delete": f"Deleted cell {result.cell}",
        }[result.mode]
        return render_change(result.change, f"{done} in {result.change.path}.")

    def summarize(
        self, args: NotebookEditInput, result: NotebookChange | None, output: ToolOutput
    ) -> str:
        if result is None or succeeded(result.change) is None:
            return failed(self.name, output)
        verb = {"replace": "Edited", "insert": "Inserted", "delete": "Deleted"}[result.mode]
        return f"{verb} cell {result.cell} of {result.change.shown}"


def _edited(data: bytes, path: Path, args: NotebookEditInput) -> tuple[str, str, str]:
    """The notebook's new JSON, the id of the cell concerned and its type."""
    try:
        document = json.loads(data)
    except (ValueError, RecursionError):
        document = None
    cells = document.get("cells") if isinstance(document, dict) else None
    if not isinstance(document, dict) or not isinstance(cells, list):
        raise ToolError(f"{path} is not a Jupyter notebook (no list of cells in its JSON).")
    # Written back indented by one space a level: every value gets its depth in spaces, so a
    # small, deep file could come back gigabytes long. Refused before it is written out.
    values = data.count(b",") + data.count(b"{") + data.count(b"[") + 1
    if len(data) + values * (nesting_depth(document) + 2) > MAX_EDITED_BYTES:
        raise ToolError(
            f"{path} nests too deeply to be rewritten as a notebook within {MAX_EDITED_BYTES} "
            "bytes; change it with Edit or Write instead."
        )
    ids = [cell_id(c, i) if isinstance(c, dict) else f"cell-{i}" for i, c in enumerate(cells)]
    index = _find(ids, args.cell_id, path) if args.cell_id else -1
    if args.edit_mode == "delete":
        removed = cells.pop(index)
        kind = removed.get("cell_type", "raw") if isinstance(removed, dict) else "raw"
        return _dumped(document), ids[index], str(kind)
    if args.edit_mode == "insert":
        assert args.cell_type is not None  # validate
        new_id = secrets.token_hex(4)
        cells.insert(index + 1, _new_cell(args.cell_type, args.new_source, new_id, document))
        return _dumped(document), new_id, args.cell_type
    cell = cells[index]
    if not isinstance(cell, dict):
        raise ToolError(f"Cell {ids[index]} of {path} is not a cell object; it cannot be edited.")
    kind = args.cell_type or cell.get("cell_type") or "code"
    cell["cell_type"] = kind
    cell["source"] = args.new_source
    if kind == "code":
        cell["outputs"], cell["execution_count"] = [], None
    else:
        cell.pop("outputs", None)
        cell.pop("execution_count", None)
    return _dumped(document), ids[index], str(kind)


def _find(ids: list[str], wanted: str, path: Path) -> int:
    if wanted in ids:
        return ids.index(wanted)
    shown = ", ".join(ids[:20]) + (", ..." if len(ids) > 20 else "")
    raise ToolError(
        f"{path} has no cell {wanted!r}. Its cells are: {shown or '(none)'}. Read the notebook "
        "to see them."
    )


def _new_cell(kind: str, source: str, new_id: str, document: dict[str, Any]) -> dict[str, Any]:
    cell: dict[str, Any] = {"cell_type": kind, "metadata": {}, "source": source}
    # nbformat 4.5 and later give every cell an id.
    if (document.get("nbformat"), document.get("nbformat_minor", 0)) >= (4, 5):
        cell["id"] = new_id
    if kind == "code":
        cell["outputs"], cell["execution_count"] = [], None
    return cell


def _dumped(document: dict[str, Any]) -> str:
    try:
        # No NaN or Infinity (a number too large for a float reads as one): not JSON.
        text = json.dumps(document, indent=1, ensure_ascii=False, allow_nan=False) + "\n"
        try:
            size = len(text.encode("utf-8"))
        except UnicodeEncodeError:
            # Half a surrogate pair, which JSON may escape, has no UTF-8 form: escaped again.
            text = json.dumps(document, indent=1, allow_nan=False) + "\n"
            size = len(text)
    except ValueError as exc:
        raise ToolError(
            f"The notebook holds a number JSON cannot write back ({exc}); change it with Edit."
        ) from None
    if size > MAX_EDITED_BYTES:
        raise ToolError(
            f"The notebook would be {size} bytes long once changed (numbers and indentation are "
            f"written out in full), more than the {MAX_EDITED_BYTES} bytes a file may be written "
            "with; change it with Edit instead, or use a shorter new_source."
        )
    return text
