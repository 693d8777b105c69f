"""Read of a Jupyter notebook and of a PDF through the real daemon and OPA (cells and outputs as
text, a notebook's image as an image block; a PDF's pages), and NotebookEdit in the sandbox."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from tests.integration.conftest import OWNER_GID, OWNER_UID
from tests.integration.harness import RunningDaemon, text_of
from tests.unit.pdf_maker import pdf_with_pages

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


@pytest.mark.docker
def test_notebook_edit_changes_a_cell_in_the_sandbox(
    sandbox_daemon: RunningDaemon, sandbox_dir: Path
) -> None:
    path = sandbox_dir / "edit.ipynb"
    cells = [{"id": "c1", "cell_type": "code", "source": "1", "outputs": [], "metadata": {}}]
    path.write_text(
        json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
    )
    os.chown(path, OWNER_UID, OWNER_GID)
    assert not sandbox_daemon.execute("Read", {"file_path": str(path)}).result.is_error
    answered = sandbox_daemon.execute(
        "NotebookEdit", {"notebook_path": str(path), "cell_id": "c1", "new_source": "2 + 2"}
    )
    assert answered.decision.outcome == pb.ALLOW, text_of(answered)
    assert text_of(answered) == f"Updated cell c1 (code) in {path}."
    assert answered.report.sandbox_id, "the write did not go through the sandbox"
    assert json.loads(path.read_text())["cells"][0]["source"] == "2 + 2"
    assert path.stat().st_uid == OWNER_UID


def test_a_pdf_is_read_page_by_page(host_daemon: RunningDaemon, workdir: Path) -> None:
    path = workdir / "report.pdf"
    path.write_bytes(pdf_with_pages(["Quarterly summary", "Appendix text"]))
    answered = host_daemon.execute("Read", {"file_path": str(path), "pages": "2"})
    assert answered.decision.outcome == pb.ALLOW, text_of(answered)
    assert '<page number="2">\nAppendix text\n</page>' in text_of(answered)
    assert "Quarterly" not in text_of(answered)
    assert (
        answered.summary
        == f"Read PDF {path.relative_to(host_daemon.workspace.resolve())} (pages 2-2 of 2)"
    )
