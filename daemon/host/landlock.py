"""Host-side helper programs (ripgrep) confined by the kernel to reading one workspace.

`tooljail-landlock` (daemon/host/landlock.c, built by `make setup`) restricts itself with a
Landlock ruleset, then execs the program: the program may read the pinned workspace (by
descriptor) and execute the system's programs and libraries, nothing else; no writes, no TCP, no
signals out. Checks happen when a file is opened, after symbolic links are resolved, so a
directory or file swapped for a symlink to outside while the program walks fails with EACCES
instead of being read. The wrapper is needed because the daemon has threads: it cannot run code
between fork and exec in the child itself.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from daemon.errors import ToolError
from daemon.host.pinned import PinnedDirectory

HELPER_NAME = "tooljail-landlock"
#: Where the dynamic loader finds a program and its libraries (read and execute, no writing).
SYSTEM_PATHS = ("/usr", "/lib", "/lib64", "/etc/ld.so.cache")
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


def confined(program: str, workspace: PinnedDirectory) -> Confined:
    """`program` confined to reading `workspace` (and running system programs)."""
    command = [find_helper(), "--read-fd", str(workspace.fd)]
    for path in SYSTEM_PATHS:
        command += ["--exec", path]
    if not any(program.startswith(p.rstrip("/") + "/") for p in SYSTEM_PATHS):
        command += ["--exec", program]
    return Confined((*command, "--", program), (workspace.fd,))


#: The wrapper's exit status when the confinement could not be set up (nothing ran).
NOT_CONFINED_EXIT = 125
