"""NotebookEdit: replace, insert and delete a cell by the id Read shows; read-before-write; a
code cell's outputs cleared with its source; clear errors for bad inputs (fake sandbox)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from daemon.tools.contract import CallContext
from daemon.tools.files.notebook_edit import NotebookEditTool
from daemon.tools.read import ReadTool
from tests.unit.fake_sandbox import make_context, run_tool, text_of

CELLS = [
    {"id": "intro", "cell_type": "markdown", "metadata": {}, "source": "# Title"},
    {
        "id": "calc",
        "cell_type": "code",
        "metadata": {},
        "execution_count": 3,
        "source": ["x = 1\n", "x + 1"],
        "outputs": [{"output_type": "execute_result", "data": {"text/plain": "2"}}],
    },
]


@pytest.fixture
def nb(tmp_path: Path) -> Path:
    path = (tmp_path / "a.ipynb").resolve()
    path.write_text(
        json.dumps({"cells": CELLS, "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
    )
    return path


@pytest.fixture
async def ctx(tmp_path: Path, nb: Path) -> CallContext:
    context = make_context(tmp_path)
    assert not (await run_tool(ReadTool(), {"file_path": str(nb)}, context)).is_error
    return context


async def edit(ctx: CallContext, nb: Path, **tool_input: Any) -> str:
    output = await run_tool(NotebookEditTool(), {"notebook_path": str(nb), **tool_input}, ctx)
    assert not output.is_error, text_of(output)
    return text_of(output)


def cells(nb: Path) -> list[dict[str, Any]]:
    loaded: list[dict[str, Any]] = json.loads(nb.read_text())["cells"]
    return loaded


async def test_replace_sets_the_source_and_clears_a_code_cells_outputs(
    ctx: CallContext, nb: Path
) -> None:
    text = await edit(ctx, nb, cell_id="calc", new_source="x = 2\nx * 3")
    assert text == f"Updated cell calc (code) in {nb}."
    calc = cells(nb)[1]
    assert calc["source"] == "x = 2\nx * 3"
    assert calc["outputs"] == [] and calc["execution_count"] is None
    assert cells(nb)[0] == CELLS[0]


async def test_insert_after_a_cell_and_at_the_start(ctx: CallContext, nb: Path) -> None:
    text = await edit(
        ctx, nb, cell_id="intro", new_source="print(0)", cell_type="code", edit_mode="insert"
    )
    new_id = text.split("with id ", 1)[1].split(" ", 1)[0]
    assert [c.get("id") for c in cells(nb)] == ["intro", new_id, "calc"]
    assert cells(nb)[1] == {
        "cell_type": "code", "metadata": {}, "source": "print(0)", "id": new_id,
        "outputs": [], "execution_count": None,
    }  # fmt: skip
    await run_tool(ReadTool(), {"file_path": str(nb)}, ctx)
    await edit(ctx, nb, new_source="# First", cell_type="markdown", edit_mode="insert")
    assert cells(nb)[0]["source"] == "# First" and "outputs" not in cells(nb)[0]


async def test_delete_removes_the_cell(ctx: CallContext, nb: Path) -> None:
    assert await edit(ctx, nb, cell_id="intro", new_source="", edit_mode="delete") == (
        f"Deleted cell intro in {nb}."
    )
    assert [c["id"] for c in cells(nb)] == ["calc"]


async def test_cells_without_ids_are_named_by_position(tmp_path: Path) -> None:
    path = (tmp_path / "old.ipynb").resolve()
    old = [{"cell_type": "code", "source": "a", "outputs": [], "metadata": {}}] * 2
    path.write_text(json.dumps({"cells": old, "nbformat": 4, "nbformat_minor": 2}))
    ctx = make_context(tmp_path)
    read = text_of(await run_tool(ReadTool(), {"file_path": str(path)}, ctx))
    assert '<cell id="cell-1" type="code">' in read
    await edit(ctx, path, cell_id="cell-1", new_source="b")
    assert [c["source"] for c in cells(path)] == ["a", "b"]
    await run_tool(ReadTool(), {"file_path": str(path)}, ctx)
    await edit(ctx, path, new_source="c", cell_type="code", edit_mode="insert")
    assert "id" not in cells(path)[0]  # nbformat 4.2 cells have no ids


@pytest.mark.parametrize(
    ("tool_input", "message"),
    [
        ({"cell_id": "nope", "new_source": "x"}, "has no cell 'nope'. Its cells are: intro, calc"),
        ({"new_source": "x"}, "cell_id is required to replace a cell"),
        ({"new_source": "x", "edit_mode": "insert"}, "cell_type is required to insert"),
        ({"cell_id": "calc", "new_source": "x", "edit_mode": "move"}, "edit_mode"),
    ],
)
async def test_bad_inputs_say_what_to_do(
    ctx: CallContext, nb: Path, tool_input: dict[str, Any], message: str
) -> None:
    before = nb.read_text()
    output = await run_tool(NotebookEditTool(), {"notebook_path": str(nb), **tool_input}, ctx)
    assert output.is_error and message in text_of(output), text_of(output)
    assert nb.read_text() == before


async def test_a_notebook_not_read_or_changed_since_is_refused(tmp_path: Path, nb: Path) -> None:
    fresh = make_context(tmp_path)
    output = await run_tool(
        NotebookEditTool(), {"notebook_path": str(nb), "cell_id": "calc", "new_source": "y"}, fresh
    )
    assert output.is_error and "has not been read in this session" in text_of(output)
    await run_tool(ReadTool(), {"file_path": str(nb)}, fresh)
    nb.write_text(nb.read_text().replace("# Title", "# Changed"))
    output = await run_tool(
        NotebookEditTool(), {"notebook_path": str(nb), "cell_id": "calc", "new_source": "y"}, fresh
    )
    assert output.is_error and "modified since it was last read" in text_of(output)


async def test_only_notebooks_and_only_existing_ones(tmp_path: Path, ctx: CallContext) -> None:
    other = tmp_path / "a.py"
    output = await run_tool(
        NotebookEditTool(), {"notebook_path": str(other), "cell_id": "x", "new_source": "y"}, ctx
    )
    assert output.is_error and "must be a Jupyter notebook (.ipynb)" in text_of(output)
    missing = tmp_path / "missing.ipynb"
    output = await run_tool(
        NotebookEditTool(), {"notebook_path": str(missing), "cell_id": "x", "new_source": "y"}, ctx
    )
    assert output.is_error and "does not exist" in text_of(output)


async def test_a_notebook_of_countless_values_is_not_parsed(tmp_path: Path) -> None:
    # Read as JSON text (offset and limit), then edited: parsed, each `{}` would be a dict.
    path = (tmp_path / "dense.ipynb").resolve()
    path.write_bytes(b'{"cells":[' + b"{}," * 80_000 + b"{}]}")
    context = make_context(tmp_path)
    shown = await run_tool(ReadTool(), {"file_path": str(path), "offset": 1, "limit": 1}, context)
    assert not shown.is_error
    output = await run_tool(
        NotebookEditTool(),
        {"notebook_path": str(path), "edit_mode": "insert", "cell_type": "code", "new_source": "x"},
        context,
    )
    assert output.is_error and "JSON objects and arrays" in text_of(output), text_of(output)


async def test_a_deep_notebook_that_would_come_back_gigabytes_long_is_refused(
    tmp_path: Path,
) -> None:
    # Written back with one space of indent a level: 900 levels around many zeros is a few
    # kilobytes read, and hundreds of megabytes written.
    deep = "[" * 900 + ",".join(["0"] * 40_000) + "]" * 900
    path = (tmp_path / "deep.ipynb").resolve()
    path.write_text(
        '{"cells": [{"id": "c1", "cell_type": "code", "source": "", "outputs": []}], '
        f'"metadata": {{"x": {deep}}}}}'
    )
    context = make_context(tmp_path)
    assert not (await run_tool(ReadTool(), {"file_path": str(path)}, context)).is_error
    before = path.read_bytes()
    output = await run_tool(
        NotebookEditTool(),
        {"notebook_path": str(path), "cell_id": "c1", "new_source": "x"},
        context,
    )
    assert output.is_error and "nests too deeply" in text_of(output), text_of(output)
    assert path.read_bytes() == before


async def test_a_cell_whose_source_would_make_the_notebook_too_large_is_refused(
    ctx: CallContext, nb: Path
) -> None:
    # Control characters are written as \u escapes: six bytes each.
    before = nb.read_text()
    output = await run_tool(
        NotebookEditTool(),
        {"notebook_path": str(nb), "cell_id": "calc", "new_source": "\x01" * (6 << 20)},
        ctx,
    )
    assert output.is_error and "would be" in text_of(output), text_of(output)
    assert nb.read_text() == before


def _notebook_with(metadata_x: str) -> str:
    return (
        '{"cells": [{"id": "c1", "cell_type": "code", "source": "", "outputs": []}], '
        f'"metadata": {{"x": {metadata_x}}}}}'
    )


@pytest.mark.parametrize(
    ("metadata_x", "message"),
    [
        # 1E15 is written back as 1000000000000000.0, at depth 60: 40 MB from 2.5 MB.
        ("[" * 57 + ",".join(["1E15"] * 499_990) + "]" * 57, "bytes long once changed"),
        ("[1e400]", "cannot write back"),  # a float's infinity: not JSON
    ],
)
async def test_a_notebook_that_cannot_be_written_back_as_it_was_read_is_refused(
    tmp_path: Path, metadata_x: str, message: str
) -> None:
    path = (tmp_path / "n.ipynb").resolve()
    path.write_text(_notebook_with(metadata_x))
    context = make_context(tmp_path)
    assert not (await run_tool(ReadTool(), {"file_path": str(path)}, context)).is_error
    before = path.read_bytes()
    output = await run_tool(
        NotebookEditTool(),
        {"notebook_path": str(path), "cell_id": "c1", "new_source": "y"},
        context,
    )
    assert output.is_error and message in text_of(output), text_of(output)
    assert path.read_bytes() == before


async def test_a_notebook_holding_a_lone_surrogate_is_edited_and_keeps_it(tmp_path: Path) -> None:
    # JSON may escape half of a surrogate pair; Python reads it as a lone surrogate, which has
    # no UTF-8 form: the notebook is written back with that one escaped as it was.
    path = (tmp_path / "s.ipynb").resolve()
    path.write_text(_notebook_with('"caf\\udce9 é"'))
    context = make_context(tmp_path)
    assert not (await run_tool(ReadTool(), {"file_path": str(path)}, context)).is_error
    output = await run_tool(
        NotebookEditTool(),
        {"notebook_path": str(path), "cell_id": "c1", "new_source": "ü"},
        context,
    )
    assert not output.is_error, text_of(output)
    written = json.loads(path.read_bytes().decode("utf-8"))
    assert written["metadata"]["x"] == "caf\udce9 é"
    assert written["cells"][0]["source"] == "ü"
