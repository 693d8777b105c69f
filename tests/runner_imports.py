"""What starting the sandbox runner imports, and from where (unit tests on the host, integration
in the image)."""

from __future__ import annotations

import subprocess

#: Modules the runner must not import before a request asks for them: every container starts
#: it, and these cost it from 1 ms (functools) to 50 ms (asyncio) of CPU each (measured in the
#: sandbox image).
HEAVY_MODULES = {
    "argparse",
    "asyncio",
    "collections",
    "contextlib",
    "dataclasses",
    "enum",
    "functools",
    "hashlib",
    "inspect",
    "json",
    "pathlib",
    "platform",
    "re",
    "signal",
    "typing",
}


def modules_after_start(python: list[str], runner_folder: str) -> set[str]:
    """What importing the runner, as a container starts it, leaves in sys.modules."""
    probe = "import sys; sys.path.insert(0, sys.argv[1]); import runner; print(*sys.modules)"
    done = subprocess.run(
        [*python, "-E", "-s", "-S", "-c", probe, runner_folder],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return set(done.stdout.split())


def loaded_from(python: list[str], folder: str) -> str:
    """What `import runner` in `folder` reports under -v (where each module's code came from)."""
    done = subprocess.run(
        [*python, "-E", "-s", "-S", "-v", "-c", f"import sys; sys.path.insert(0, {folder!r})"
         "; import runner"],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    return done.stderr
