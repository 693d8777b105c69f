"""The sandbox image built by sandbox/image/build.sh: present under the recipe's tag and usable."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from sandbox import image
from sandbox.hardening import RUNNER_DIR
from sandbox.runner import RUNNER_SOURCE
from sandbox.runner_stage import stage_runner
from tests.runner_imports import HEAVY_MODULES, loaded_from, modules_after_start

pytestmark = pytest.mark.docker

# The container settings the sandbox backend uses (REFERENCE.md section 6), so the image is known to
# work under them and not only as root with a writable root filesystem.
HARDENED = [
    "--network", "none", "--read-only", "--tmpfs", "/tmp", "--cap-drop", "ALL",
    "--security-opt", "no-new-privileges", "--user", "1000:1000", "--init",
]  # fmt: skip


@pytest.fixture(scope="module")
def image_ref() -> str:
    ref = image.default_image_ref()
    if shutil.which("docker") is None:
        pytest.fail("the docker CLI is not installed: run scripts/ensure-docker.sh")
    found = subprocess.run(
        ["docker", "image", "inspect", ref], capture_output=True, check=False, timeout=30
    )
    if found.returncode != 0:
        pytest.fail(f"{ref} is not built (or Docker is down): run `make image`")
    return ref


@pytest.fixture
def client() -> Iterator[docker.DockerClient]:
    client = docker.from_env()
    try:
        yield client
    finally:
        client.close()


def run(ref: str, *command: str, options: list[str] | None = None) -> str:
    """Runs `command` in a throw-away container and returns its stdout."""
    done = subprocess.run(
        ["docker", "run", "--rm", *(options or ["--network", "none"]), ref, *command],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_image_present_finds_the_recipe_tag(image_ref: str, client: docker.DockerClient) -> None:
    assert image.image_present(client)
    assert not image.image_present(client, "tooljail-sandbox:000000000000")
    labels = client.images.get(image_ref).labels
    assert labels["io.tooljail.recipe"] == image.recipe_hash()


def test_the_runner_starts_without_the_modules_only_some_requests_need(image_ref: str) -> None:
    """The image's own Python (another patch release than the host's) imports what the host's
    does: none of the modules that cost a container most of its runner's start."""
    folder = str(RUNNER_SOURCE.parent)
    loaded = modules_after_start(
        [
            "docker",
            "run",
            "--rm",
            "--network",
            "none",
            "-v",
            f"{folder}:/r:ro",
            image_ref,
            "python3",
        ],
        "/r",
    )
    assert "runner" in loaded and "confine" in loaded
    assert not loaded & HEAVY_MODULES


def test_the_image_python_takes_the_json_accelerator_the_runner_checked(image_ref: str) -> None:
    folder = str(RUNNER_SOURCE.parent)
    probe = "import sys; sys.path.insert(0, '/r'); import wire; print(wire.ACCELERATED)"
    options = ["--network", "none", "-v", f"{folder}:/r:ro"]
    assert run(image_ref, "python3", "-E", "-s", "-S", "-c", probe, options=options) == "True\n"


def test_the_images_python_runs_the_staged_runner_from_its_compiled_forms(
    image_ref: str, tmp_path: Path
) -> None:
    """Compiled by the daemon's interpreter, checked by the image's (another patch release):
    the compiled forms are used, not compiled again in every container."""
    staged = stage_runner(tmp_path / "runner")
    said = loaded_from(
        ["docker", "run", "--rm", "--network", "none", "-v", f"{staged}:{RUNNER_DIR}:ro",
         image_ref, "python3"],
        RUNNER_DIR,
    )  # fmt: skip
    for module in ("runner", "confine", "spawn", "mcp_stdio"):
        assert f"code object from '{RUNNER_DIR}/__pycache__/{module}." in said, said


def test_python3_has_json(image_ref: str) -> None:
    out = run(image_ref, "python3", "-c", "import json; print(json.dumps({'a': [1]}))")
    assert out == '{"a": [1]}\n'


def test_bash_and_git_are_present(image_ref: str) -> None:
    assert run(image_ref, "bash", "-c", "echo ${BASH_VERSINFO[0]}").strip() == "5"
    assert run(image_ref, "git", "--version").startswith("git version 2.")


def test_runs_as_the_uid_it_is_given(image_ref: str) -> None:
    assert run(image_ref, "id", "-u", options=["--network", "none", "--user", "1000:1000"]) == (
        "1000\n"
    )


def test_usable_under_the_hardened_settings(image_ref: str) -> None:
    # HOME=/tmp (set by the image) is writable even with a read-only root, so git can keep state.
    script = "cd /tmp && git init -q repo && git -C repo status --short && echo $HOME && id -u"
    assert run(image_ref, "bash", "-c", script, options=HARDENED) == "/tmp\n1000\n"


def test_the_root_filesystem_is_slim(image_ref: str) -> None:
    # Docs, man pages and apt lists are removed at build time; licences stay.
    out = run(
        image_ref,
        "bash",
        "-c",
        "find /usr/share/man /var/lib/apt/lists -mindepth 1 | wc -l; ls /usr/share/doc/bash",
    )
    assert out == "0\ncopyright\n"
