"""Host-side helper programs (ripgrep) confined by the kernel to reading one workspace.

`tooljail-landlock` (daemon/host/landlock.c, built by `make setup`) restricts itself with a
Landlock ruleset, then execs the program: the program may read the pinned workspace (by
descriptor) and read and execute its own files (the program, its loader and the libraries the
loader lists for it), nothing else: no other file of /usr, no writes, no TCP, no signals out, no
socket at all (a seccomp filter: Landlock does not cover a Unix socket's path), and, run by a
root daemon, as the overflow uid 65534 with no capability but reading any file: Landlock leaves
root's own rights in place (rounds 138 and 139: BPF, fanotify, and the chmod an owner may make).
Checks happen when a file is opened, after symbolic links are resolved, so a directory or file
swapped for a symlink to outside while the program walks fails with EACCES instead of being read.
The wrapper is needed because the daemon has threads: it cannot run code between fork and exec in
the child itself.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from daemon.errors import ToolError
from daemon.host.child import run_child
from daemon.host.pinned import PinnedDirectory

HELPER_NAME = "tooljail-landlock"
#: Read by the dynamic loader of every program: where the libraries are (no secrets).
LOADER_CACHE = "/etc/ld.so.cache"
_PROJECT_HELPER = Path(__file__).resolve().parents[2] / ".tools" / "bin" / HELPER_NAME


@dataclass(frozen=True)
class Confined:
    """A program started confined to one workspace."""

    command: tuple[str, ...]
    """The argv prefix: the wrapper, its rules, then the program."""
    fds: tuple[int, ...]
    """Descriptors the command names; hand them down to the child (pass_fds)."""


def find_helper() -> str:
    """The wrapper: the source tree's build (`make setup`), else the installed one beside the
    interpreter (`make install`), else one on PATH; ToolError when there is none (nothing is
    run unconfined)."""
    for candidate in (_PROJECT_HELPER, Path(sys.executable).parent / HELPER_NAME):
        if os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which(HELPER_NAME)
    if found is None:
        raise ToolError(
            f"The host-side search cannot be confined: {HELPER_NAME} is not installed on the "
            "daemon's host (make setup builds it). Use Bash (runs in the sandbox) to search "
            "instead, and tell the operator."
        )
    return found


def _wrapper() -> list[str]:
    """The wrapper with what every program it runs gets: no socket, and under a root daemon the
    overflow uid with the one capability of reading any file. A search of a project its owner
    keeps private reads it as the daemon does; the interpreter may be where only root reads
    (under /root). What they may read is Landlock's to say."""
    return [find_helper(), "--no-sockets", "--keep-cap", "dac_read_search", "--read", LOADER_CACHE]


async def confined_to_its_input(program: str, *, memory_mb: int) -> tuple[str, ...]:
    """The argv prefix running `program` so that it reads nothing but what it is given on its
    standard input (and its own files), mapping at most `memory_mb` MiB: a filter of bytes a
    sandbox wrote (attacker round 143: BashOutput's ran as the daemon, root often)."""
    return await _running(program, "--memory-mb", str(memory_mb))


async def confined(program: str, workspace: PinnedDirectory, *, memory_mb: int) -> Confined:
    """`program` confined to reading `workspace` (and running its own files), mapping at most
    `memory_mb` MiB."""
    argv = await _running(program, "--memory-mb", str(memory_mb), "--read-fd", str(workspace.fd))
    return Confined(argv, (workspace.fd,))


async def _running(program: str, *options: str) -> tuple[str, ...]:
    """The wrapper with `options`, allowed to run `program`'s own files, then `program`."""
    command = [*_wrapper(), *options]
    for path in await program_files(program):
        command += ["--exec", path]
    return (*command, "--", program)


async def confined_python(script: str) -> tuple[str, ...]:
    """The argv prefix running `script` with this interpreter, isolated (`-I`: no environment,
    no user site) and confined to reading what the interpreter itself is made of: its program
    and libraries, the folders of those libraries (its extension modules load more from there),
    its installation and this environment's (the standard library, the installed packages),
    and the script. Nothing else of the host (workspaces, the daemon's configuration and state,
    /etc) may be read, nothing written, no socket made (round 136: the engine's Unix socket was
    in reach), no signals out; under a root daemon it runs as the overflow uid, with no
    capability but reading (rounds 138 and 139)."""
    interpreter = os.path.realpath(sys.executable)
    files = await program_files(interpreter)
    command = [*_wrapper(), "--read", script]
    for path in files:
        command += ["--exec", path]
    folders = {str(Path(path).parent) for path in files if path != interpreter}
    folders |= {sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix}
    for folder in sorted(folders):
        command += ["--read", folder]
    return (*command, "--", sys.executable, "-I", script)


def started_in(argv: list[str], directory_fd: int) -> list[str]:
    """A `Confined` command line whose program starts in the directory open at `directory_fd`:
    the wrapper enters it once it runs. A child's working directory given to Popen is entered
    before exec, while the daemon waits for the exec, so a directory on a filesystem that takes
    its time (a FUSE mount's answer to the permission check) would hold the event loop."""
    split = argv.index("--")
    return [*argv[:split], "--chdir-fd", str(directory_fd), *argv[split:]]


_FileId = tuple[str, int, int]
_programs: dict[str, tuple[_FileId, ...]] = {}
# "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or "/lib64/ld-linux-x86-64.so.2 (0x...)"
_LISTED = re.compile(r"^\s*(?:\S+ => )?(/\S+) \(0x[0-9a-f]+\)$", re.MULTILINE)


async def program_files(program: str) -> tuple[str, ...]:
    """The files `program` needs to start: itself, its loader and its shared libraries, by real
    path (a Landlock rule is on the file a path leads to). Remembered, and looked up again when
    any of them was replaced (a package upgrade)."""
    known = _programs.get(program)
    if known is None or not all(_identity(path) == (path, dev, ino) for path, dev, ino in known):
        known = tuple(_identity(path) for path in await _listed_files(program))
        _programs[program] = known
    return tuple(path for path, _, _ in known)


def _identity(path: str) -> _FileId:
    try:
        info = Path(path).stat()
    except OSError:
        return (path, -1, -1)
    return (path, info.st_dev, info.st_ino)


async def _listed_files(program: str) -> list[str]:
    """The program and what `ldd` lists for it (the loader's own list; a static program has
    none)."""
    ldd = shutil.which("ldd")
    if ldd is None:
        raise ToolError(
            "The host-side search cannot be confined: ldd (which lists the libraries a program "
            "may load) is not installed on the daemon's host. Tell the operator."
        )
    listed = await run_child(
        [ldd, program], timeout_s=30, output_cap=64 * 1024, env={"LC_ALL": "C", "PATH": os.defpath}
    )
    files = [program, *_LISTED.findall(listed.stdout.text())]
    return sorted({os.path.realpath(path) for path in files})


#: The wrapper's exit status when the confinement could not be set up (nothing ran).
NOT_CONFINED_EXIT = 125
