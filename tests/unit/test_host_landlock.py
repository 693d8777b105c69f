"""The Landlock wrapper on this kernel: a program it starts reads the workspace it was handed
and runs system programs, and is refused everything else, symlinks to outside included."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import stat
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon.host.landlock import NOT_CONFINED_EXIT, confined, confined_python, find_helper
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
    wrapped = asyncio.run(confined(argv[0], workspace, memory_mb=256))
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


def test_a_confined_python_script_reads_nothing_of_the_host_but_python(tmp_path: Path) -> None:
    """Round 117's lead: the PDF extractor, a parser of model-made bytes, ran as the daemon's
    account (root, often) free to read the host. Confined, a script runs and imports the
    standard library and installed packages, and is refused the files beside it, the host's
    secrets, writes and TCP."""
    (tmp_path / "secret.txt").write_text("the daemon's token\n")
    (tmp_path / "rootfile").write_text("root's\n")
    (tmp_path / "rootfile").chmod(0o755)
    listener = socket.create_server(("127.0.0.1", 0))
    # Round 136: a Unix socket by its path (the engine's, the daemon's, OPA's) was reachable.
    local = socket.socket(socket.AF_UNIX)
    local.bind(str(tmp_path / "engine.sock"))
    local.listen()
    script = tmp_path / "probe.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import json, os, socket, pypdf
            def refused_call(name, *args, errno=1):
                import ctypes
                libc = ctypes.CDLL(None, use_errno=True)
                result = getattr(libc, name)(*args)
                if result == 0 and name == "syscall" and args[0] in (56, 435):
                    os._exit(0)  # the child of a clone that was not refused
                return result == -1 and ctypes.get_errno() == errno
            def threads_run():
                import threading
                done = []
                worker = threading.Thread(target=lambda: done.append(1))
                worker.start()
                worker.join()
                return done == [1]
            def own_limits():
                import resource
                resource.setrlimit(resource.RLIMIT_CPU, (300, 300))
                os.setpriority(os.PRIO_PROCESS, 0, 19)
                return resource.getrlimit(resource.RLIMIT_CPU) == (300, 300)
            def denied(attempt):
                try:
                    attempt()
                except PermissionError:
                    return True
                return False
            print(json.dumps({{
                "secret": denied(lambda: open({str(tmp_path / "secret.txt")!r}).read()),
                "shadow": denied(lambda: open("/etc/shadow").read()),
                "write": denied(lambda: open({str(tmp_path / "new.txt")!r}, "w")),
                "tcp": denied(lambda: socket.create_connection({listener.getsockname()!r})),
                "unix": denied(lambda: socket.socket(socket.AF_UNIX).connect(
                    {str(tmp_path / "engine.sock")!r})),
                # Round 137: io_uring makes and connects sockets without those system calls.
                "io_uring": refused_call("syscall", 425, 4, bytes(120)),
                "inotify": refused_call("inotify_init1", 0),
                # Round 140: every tenant's helper is uid 65534; nothing of one reaches another.
                "prlimit other": refused_call("prlimit", 1, 7, None, None),
                "renice other": refused_call("setpriority", 0, 1, 19),
                "renice user": refused_call("setpriority", 2, 0, 19),
                "shared memory": refused_call("shmget", 0, 4096, 0o1600),
                "keys": refused_call("syscall", 250, 0, -4, 0),
                "own limits": own_limits(),
                # Round 141's leads: no new namespaces, no file handles (the read-anything
                # capability opens any inode by one), no other process by pidfd or its memory,
                # no anonymous executable files, no tracing.
                "new user namespace": refused_call("unshare", 0x10000000),
                # Round 143: clone and clone3 made namespaces unshare may not (the child, if
                # any, exits at once).
                "clone namespace": refused_call("syscall", 56, 0x10000000 | 17, 0, 0, 0, 0),
                "clone3": refused_call("syscall", 435, bytes(88), 88, errno=38),
                "threads": threads_run(),
                "join namespace": refused_call("setns", 0, 0),
                "file handle": refused_call("syscall", 303, -100, b"/", bytes(136), bytes(4), 0),
                "open by handle": refused_call("syscall", 304, 0, bytes(136), 0),
                "pidfd": refused_call("syscall", 434, 1, 0),
                "memfd": refused_call("memfd_create", b"x", 0),
                "execveat": refused_call("syscall", 322, -100, b"/nonexistent", None, None, 0),
                "vm read": refused_call("process_vm_readv", os.getpid(), None, 0, None, 0, 0),
                "trace": refused_call("ptrace", 0, 0, None, None),
                # Round 138's lead: root under Landlock kept every capability.
                "setuid": denied(lambda: os.setuid(1)),
                "chroot": denied(lambda: os.chroot("/")),
                # Round 139: as uid 0 it owned every root file, and chmod needs no capability.
                "chmod": denied(lambda: os.chmod({str(tmp_path / "rootfile")!r}, 0o4755)),
                "uid": os.getuid() != 0 and os.geteuid() != 0,
            }}))
            """
        )
    )
    try:
        argv = asyncio.run(confined_python(str(script)))
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    finally:
        listener.close()
        local.close()
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "secret": True,
        "shadow": True,
        "write": True,
        "tcp": True,
        "unix": True,
        "io_uring": True,
        "inotify": True,
        "prlimit other": True,
        "renice other": True,
        "renice user": True,
        "shared memory": True,
        "keys": True,
        "own limits": True,
        "new user namespace": True,
        "clone namespace": True,
        "clone3": True,
        "threads": True,
        "join namespace": True,
        "file handle": True,
        "open by handle": True,
        "pidfd": True,
        "memfd": True,
        "execveat": True,
        "vm read": True,
        "trace": True,
        "setuid": True,
        "chroot": True,
        "chmod": True,
        "uid": True,
    }
    assert stat.S_IMODE((tmp_path / "rootfile").stat().st_mode) == 0o755
    assert not (tmp_path / "new.txt").exists()


def test_a_search_reads_a_project_its_owner_keeps_private(workspace: PinnedDirectory) -> None:
    """The one capability a confined search keeps as root is reading any file: a regular user's
    project in mode 0700 is still searched, as the daemon reads it."""
    private = workspace.path / "private"
    private.mkdir(mode=0o700)
    (private / "notes.txt").write_text("kept\n")
    (private / "notes.txt").chmod(0o600)
    for made in (private, private / "notes.txt"):
        os.chown(made, 1234, 1234)
    done = run(workspace, "/bin/cat", "private/notes.txt")
    assert (done.returncode, done.stdout) == (0, "kept\n"), done.stderr
