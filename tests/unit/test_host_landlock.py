"""The Landlock wrapper on this kernel: a program it starts reads the workspace it was handed
and runs system programs, and is refused everything else, symlinks to outside included."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon.host.landlock import NOT_CONFINED_EXIT, confined, find_helper
from daemon.host.pinned import PinnedDirectory


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[PinnedDirectory]:
    root = tmp_path.resolve()
    (root / "ws" / "dir").mkdir(parents=True)
    (root / "ws" / "dir" / "in.txt").write_text("inside\n")
    (root / "out").mkdir()
    (root / "out" / "secret.txt").write_text("outside\n")
    (root / "ws" / "to-out").symlink_to(root / "out")
    (root / "ws" / "secret-link").symlink_to(root / "out" / "secret.txt")
    pinned = PinnedDirectory.pin(root / "ws")
    yield pinned
    pinned.close()


def run(workspace: PinnedDirectory, *argv: str) -> subprocess.CompletedProcess[str]:
    wrapped = asyncio.run(confined(argv[0], workspace))
    return subprocess.run(
        [*wrapped.command, *argv[1:]],
        pass_fds=wrapped.fds,
        cwd=workspace.path,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_the_workspace_is_readable(workspace: PinnedDirectory) -> None:
    done = run(workspace, "/bin/cat", "dir/in.txt")
    assert (done.returncode, done.stdout) == (0, "inside\n")


@pytest.mark.parametrize(
    "path", ["to-out/secret.txt", "secret-link", "../out/secret.txt", "/etc/hostname"]
)
def test_nothing_outside_is_readable_whatever_the_path(
    workspace: PinnedDirectory, path: str
) -> None:
    done = run(workspace, "/bin/cat", path)
    assert done.returncode != 0 and "outside" not in done.stdout
    assert "Permission denied" in done.stderr


def test_nothing_is_writable_not_even_in_the_workspace(workspace: PinnedDirectory) -> None:
    done = run(workspace, "/bin/sh", "-c", "echo x > dir/new.txt")
    assert done.returncode != 0
    assert not (workspace.path / "dir" / "new.txt").exists()


def test_refusals_of_the_wrapper_itself_run_nothing(workspace: PinnedDirectory) -> None:
    helper = find_helper()
    for argv in (
        [helper, "--read-fd", "abc", "--", "/bin/true"],
        [helper, "--bogus", "x", "--", "/bin/true"],
        [helper, "--read-fd", str(workspace.fd)],
    ):
        done = subprocess.run(argv, pass_fds=(workspace.fd,), capture_output=True, text=True)
        assert done.returncode == NOT_CONFINED_EXIT, argv
        assert done.stderr.startswith("tooljail-landlock: ")


@pytest.mark.parametrize("path", ["/usr/lib/os-release", "/usr/share/base-files/motd"])
def test_system_files_beyond_the_programs_own_are_refused(
    workspace: PinnedDirectory, path: str
) -> None:
    """The program may run (its own file, loader and libraries), not read the rest of /usr."""
    done = run(workspace, "/bin/cat", path)
    assert done.returncode != 0 and done.stdout == ""
    assert "Permission denied" in done.stderr


def test_the_program_and_its_libraries_still_run(workspace: PinnedDirectory) -> None:
    rg = shutil.which("rg")
    assert rg is not None, "ripgrep is installed by make setup"
    done = run(workspace, rg, "--no-config", "inside", "dir")
    assert (done.returncode, done.stdout) == (0, "dir/in.txt:inside\n"), done.stderr
