"""The sandbox image tag follows the recipe's content; the tag command needs no third-party code."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox import image

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def recipe_copy(tmp_path: Path) -> Path:
    """A private copy of sandbox/image/ that a test may edit."""
    copy = tmp_path / "image"
    shutil.copytree(image.RECIPE_DIR, copy)
    return copy


def test_tag_is_repository_and_twelve_hex_of_the_hash() -> None:
    ref = image.default_image_ref()
    assert re.fullmatch(r"tooljail-sandbox:[0-9a-f]{12}", ref)
    assert ref.endswith(":" + image.recipe_hash()[:12])


def test_hash_depends_on_content_not_location(recipe_copy: Path) -> None:
    assert image.recipe_hash(recipe_copy) == image.recipe_hash()
    assert image.recipe_hash(recipe_copy) == image.recipe_hash(recipe_copy)


def test_recipe_covers_package_list_build_script_and_dockerfile() -> None:
    names = {path.name for path in image.recipe_files()}
    assert {"packages.txt", "build.sh", "Dockerfile"} <= names


def test_adding_a_package_changes_the_tag(recipe_copy: Path) -> None:
    before = image.default_image_ref(recipe_copy)
    with (recipe_copy / "packages.txt").open("a") as packages:
        packages.write("jq\n")
    assert image.default_image_ref(recipe_copy) != before


def test_editing_the_build_script_changes_the_hash(recipe_copy: Path) -> None:
    before = image.recipe_hash(recipe_copy)
    build = recipe_copy / "build.sh"
    build.write_text(build.read_text().replace("--variant=minbase", "--variant=buildd"))
    assert image.recipe_hash(recipe_copy) != before


def test_a_new_recipe_file_changes_the_hash(recipe_copy: Path) -> None:
    before = image.recipe_hash(recipe_copy)
    (recipe_copy / "motd").write_text("hello\n")
    assert image.recipe_hash(recipe_copy) != before


def test_renaming_a_file_changes_the_hash(recipe_copy: Path) -> None:
    before = image.recipe_hash(recipe_copy)
    (recipe_copy / "Dockerfile").rename(recipe_copy / "Containerfile")
    assert image.recipe_hash(recipe_copy) != before


def test_hidden_files_do_not_change_the_hash(recipe_copy: Path) -> None:
    before = image.recipe_hash(recipe_copy)
    (recipe_copy / ".build.sh.swp").write_bytes(b"editor state")
    assert image.recipe_hash(recipe_copy) == before


def test_missing_recipe_dir_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="restore sandbox/image/"):
        image.recipe_hash(tmp_path / "absent")


def test_package_list_has_full_python3() -> None:
    # python3-minimal has no json module, which the in-container runner needs.
    lines = (image.RECIPE_DIR / "packages.txt").read_text().splitlines()
    packages = {line.split("#")[0].strip() for line in lines} - {""}
    assert "python3" in packages
    assert "python3-minimal" not in packages
    assert {"bash", "git", "coreutils"} <= packages


def test_tag_command_runs_without_site_packages() -> None:
    # -S: no site-packages, as with a system python3 before the venv exists (build.sh's case).
    done = subprocess.run(
        [sys.executable, "-S", "-m", "sandbox.image", "tag"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == image.default_image_ref()


def test_unknown_command_prints_usage() -> None:
    done = subprocess.run(
        [sys.executable, "-S", "-m", "sandbox.image", "push"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    assert done.returncode == 2
    assert "usage: python3 -m sandbox.image {tag|hash}" in done.stderr
