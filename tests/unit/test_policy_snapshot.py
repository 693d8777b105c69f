"""The policy snapshot OPA starts with: the loader's module ids as relative paths inside a
private folder, data.json stored as the REST loader stores it, nothing outside the folder."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from daemon.errors import PolicyLoadError
from daemon.policy.loader import PolicyFiles, write_policy_snapshot


def test_modules_and_data_are_written_under_their_ids(tmp_path: Path) -> None:
    folder = tmp_path / "snapshot"
    folder.mkdir()
    (folder / "stale.rego").write_text("package stale\n")
    files = PolicyFiles(
        modules={"a/b.rego": "package a\n", "c.rego": "package c\n"},
        data={"tooljail": {"x": 1}, "plain": 3},
    )
    arguments = write_policy_snapshot(files, folder)
    assert arguments == ["a/b.rego", "c.rego", "data.json"]
    assert (folder / "a" / "b.rego").read_text() == "package a\n"
    assert not (folder / "stale.rego").exists(), "a module dropped since must not come back"
    assert json.loads((folder / "data.json").read_text()) == {
        "tooljail": {"x": 1},
        "plain": {"value": 3},
    }
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


def test_a_module_id_leaving_the_folder_is_refused(tmp_path: Path) -> None:
    files = PolicyFiles(modules={"../outside.rego": "package x\n"}, data={})
    with pytest.raises(PolicyLoadError, match="not a path below"):
        write_policy_snapshot(files, tmp_path / "snapshot")
    assert not (tmp_path / "outside.rego").exists()
