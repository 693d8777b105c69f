"""Read of a Jupyter notebook through the real daemon and OPA: cells and outputs as text, its
image as an image block of the tool_result."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from tests.integration.harness import RunningDaemon, text_of

pytestmark = pytest.mark.integration

PNG = b"\x89PNG\r\n\x1a\n" + b"figure"


def test_a_notebook_is_read_cell_by_cell(host_daemon: RunningDaemon, workdir: Path) -> None:
    path = workdir / "nb.ipynb"
    figure = {"output_type": "display_data", "data": {"image/png": base64.b64encode(PNG).decode()}}
    cells = [
        {"id": "a1", "cell_type": "markdown", "source": "# Notes"},
        {"id": "b2", "cell_type": "code", "source": "plot()", "outputs": [figure]},
    ]
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4}))
    answered = host_daemon.execute("Read", {"file_path": str(path)})
    assert answered.decision.outcome == pb.ALLOW and not answered.result.is_error
    assert '<cell id="a1" type="markdown">\n# Notes' in text_of(answered)
    assert '<cell id="b2" type="code">\nplot()' in text_of(answered)
    images = [b.image for b in answered.result.content if b.HasField("image")]
    assert [i.data for i in images] == [PNG]
    assert answered.summary.startswith("Read notebook") and "2 cells" in answered.summary
