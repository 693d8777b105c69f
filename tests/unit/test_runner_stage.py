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
    said = loaded_from([sys.executable], str(staged))
    assert f"code object from '{staged}/__pycache__/runner." in said


def test_nothing_found_on_disk_is_reused_and_earlier_stagings_go(tmp_path: Path) -> None:
    """Attacker round 79: a folder found under the name of the staging was used as it was, and
    a compiled form forged to match its source's hash ran as root in every container. Each
    staging is made afresh; what earlier ones left is removed."""
    first = stage_runner(tmp_path / "runner")
    forged = first / "__pycache__" / f"runner.{sys.implementation.cache_tag}.pyc"
    forged.write_bytes(b"forged")
    (tmp_path / "runner" / ".staging-left").mkdir()
    second = stage_runner(tmp_path / "runner")
    assert second != first and not first.exists()
    assert [p.name for p in (tmp_path / "runner").iterdir()] == [second.name]
    assert (second / "__pycache__" / forged.name).read_bytes() != b"forged"


def test_a_compiled_form_that_does_not_match_its_source_is_never_run(tmp_path: Path) -> None:
    """Checked hashes: a source changed after staging is compiled anew, its stale compiled
    form ignored (a defence in depth: nothing changes a staged folder)."""
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
    with pytest.raises(PermissionError, match="someone else"):
        stage_runner(parent)


def test_a_folder_above_that_others_may_write_or_own_is_refused(tmp_path: Path) -> None:
    """Attacker round 79: with the state directory a local user's, they renamed the staged
    folder aside and put their own runner in its place, which the engine mounted in the next
    containers (it resolves the path for each). Every folder above must be root's or the
    daemon's user's, and written by them alone unless it is sticky."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(PermissionError, match=str(shared)):
        stage_runner(shared / "state" / "runner")
    owned = tmp_path / "owned"
    owned.mkdir()
    os.chown(owned, 1000, 1000)
    with pytest.raises(PermissionError, match=str(owned)):
        stage_runner(owned / "state" / "runner")
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    assert stage_runner(sticky / "state" / "runner").is_dir()


def test_a_link_in_place_of_the_folder_is_resolved_once_and_never_mounted(tmp_path: Path) -> None:
    """The engine is given the real path: a link on the way, swapped later, is not followed."""
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "runner").symlink_to(tmp_path / "elsewhere")
    staged = stage_runner(tmp_path / "runner")
    assert staged.parent == (tmp_path / "elsewhere").resolve()


@pytest.mark.skipif(os.geteuid() != 0, reason="a bind mount needs root")
def test_removing_an_earlier_staging_never_crosses_into_a_mount(tmp_path: Path) -> None:
    """Attacker round 79: removing earlier stagings deleted the files of a folder mounted in
    one. What is not the layout a staging has is left, and the folder with it."""
    canary = tmp_path / "canary"
    canary.mkdir()
    (canary / "kept").write_text("kept\n")
    first = stage_runner(tmp_path / "runner")
    (first / "mnt").mkdir()
    subprocess.run(["mount", "--bind", str(canary), str(first / "mnt")], check=True)
    try:
        stage_runner(tmp_path / "runner")
        assert (canary / "kept").read_text() == "kept\n"
        assert (first / "mnt").is_dir()  # left, with what holds it
    finally:
        subprocess.run(["umount", "-l", str(first / "mnt")], check=False)
