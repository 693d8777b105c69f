"""The runner staged for containers with its compiled forms (sandbox/runner_stage.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox.runner import RUNNER_DIR
from sandbox.runner_stage import stage_runner
from tests.runner_imports import loaded_from


def test_the_staged_folder_is_the_runners_with_compiled_forms_nobody_else_may_write(
    tmp_path: Path,
) -> None:
    staged = stage_runner(tmp_path / "runner")
    names = {p.name for p in staged.iterdir()}
    assert {"runner.py", "start.py", "confine.py", "spawn.py", "bash_env.sh"} <= names
    for source in RUNNER_DIR.iterdir():
        if source.suffix in (".py", ".sh"):
            assert (staged / source.name).read_bytes() == source.read_bytes()
    compiled = {p.name for p in (staged / "__pycache__").iterdir()}
    assert f"runner.{sys.implementation.cache_tag}.pyc" in compiled
    for path in (staged, *staged.rglob("*")):
        mode = path.stat().st_mode & 0o777
        assert mode == (0o755 if path.is_dir() else 0o644), (path, oct(mode))
    # Imported from its compiled form, which the interpreter checked against the source.
    assert f"code object from '{staged}/__pycache__/runner." in loaded_from(
        [sys.executable], str(staged)
    )


def test_staging_again_reuses_the_folder_and_a_change_makes_a_new_one(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    for path in RUNNER_DIR.iterdir():
        if path.suffix in (".py", ".sh"):
            (source / path.name).write_bytes(path.read_bytes())
    first = stage_runner(tmp_path / "runner", source)
    assert stage_runner(tmp_path / "runner", source) == first
    (source / "runner.py").write_text((source / "runner.py").read_text() + "\n# changed\n")
    second = stage_runner(tmp_path / "runner", source)
    assert second != first and not first.exists()  # the older one is gone
    assert [p.name for p in (tmp_path / "runner").iterdir()] == [second.name]


def test_a_compiled_form_that_does_not_match_its_source_is_never_run(tmp_path: Path) -> None:
    """Checked hashes: a source changed after staging (which nothing does; a defence in depth)
    is compiled anew, its stale compiled form ignored."""
    staged = stage_runner(tmp_path / "runner")
    runner = staged / "runner.py"
    runner.write_text(runner.read_text() + "\nprint('from the source')\n")
    done = subprocess.run(
        [sys.executable, "-E", "-s", "-S", "-c",
         f"import sys; sys.path.insert(0, {str(staged)!r}); import runner"],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    assert done.stdout == "from the source\n"


@pytest.mark.parametrize("mode", [0o775, 0o757])
def test_a_folder_others_may_write_is_refused(tmp_path: Path, mode: int) -> None:
    parent = tmp_path / "runner"
    parent.mkdir()
    parent.chmod(mode)
    with pytest.raises(PermissionError, match="nobody else may write"):
        stage_runner(parent)


def test_a_link_in_place_of_the_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "runner").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(PermissionError):
        stage_runner(tmp_path / "runner")
    assert os.listdir(tmp_path / "elsewhere") == []
