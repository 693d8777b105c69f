"""Read of a Jupyter notebook: cells with ids, types, sources and outputs, images as images
(only real ones), long outputs cut, and a file that only looks like one read as text."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from daemon.models import ImageContent
from daemon.tools.read import ReadTool
from tests.unit.fake_sandbox import make_context, run_tool, text_of

PNG = b"\x89PNG\r\n\x1a\n" + b"pixels"
REAL = base64.b64encode(PNG).decode()
FAKE = base64.b64encode(b"not a png").decode()
LONG = "y" * 50_000


def notebook(tmp_path: Path, cells: list[dict[str, object]]) -> Path:
    path = tmp_path / "analysis.ipynb"
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4}))
    return path


async def test_cells_come_with_their_sources_outputs_and_images(tmp_path: Path) -> None:
    path = notebook(
        tmp_path,
        [
            {"id": "intro", "cell_type": "markdown", "source": ["# Title\n", "Some text"]},
            {
                "id": 'x"><evil',
                "cell_type": "code",
                "source": "print(1)\nplot()",
                "outputs": [
                    {"output_type": "stream", "name": "stdout", "text": ["1\n"]},
                    {
                        "output_type": "display_data",
                        "data": {
                            "image/png": base64.b64encode(PNG).decode(),
                            "text/plain": "<Figure>",
                        },
                    },
                    {
                        "output_type": "display_data",
                        "data": {"image/png": base64.b64encode(b"not a png").decode()},
                    },
                    {"output_type": "error", "ename": "ValueError", "evalue": "bad"},
                ],
            },
        ],
    )
    output = await run_tool(ReadTool(), {"file_path": str(path)}, make_context(tmp_path))
    text = text_of(output)
    assert not output.is_error, text
    assert '<cell id="intro" type="markdown">\n# Title\nSome text' in text
    assert '<cell id="xevil" type="code">\nprint(1)\nplot()' in text
    assert "1\n<Figure>\n[image 1: image/png, shown below]" in text and "ValueError: bad" in text
    images = [b for b in output.content if isinstance(b, ImageContent)]
    assert [i.data for i in images] == [PNG], "a fake image was passed on, or the real one lost"


async def test_long_outputs_are_cut_and_a_non_notebook_is_text(tmp_path: Path) -> None:
    path = notebook(
        tmp_path,
        [
            {
                "cell_type": "code",
                "source": "x",
                "outputs": [{"output_type": "stream", "text": "y" * 50_000}],
            }
        ],
    )
    output = await run_tool(ReadTool(), {"file_path": str(path)}, make_context(tmp_path))
    assert "characters of output cut" in text_of(output) and '<cell id="cell-0"' in text_of(output)
    fake = tmp_path / "fake.ipynb"
    fake.write_text("just text\n")
    plain = await run_tool(ReadTool(), {"file_path": str(fake)}, make_context(tmp_path))
    assert "just text" in text_of(plain) and "<cell" not in text_of(plain)
