"""The runner that executes one request inside a sandbox container.

`runner.py` and `confine.py` are not imported by the daemon at run time: this folder is
bind-mounted read-only into every container and the runner runs there on the image's python3, so
they use the standard library only.
"""

from __future__ import annotations

from pathlib import Path

#: The runner's folder on the host, bind-mounted into every container.
RUNNER_DIR = Path(__file__).resolve().parent
#: The runner's source file on the host.
RUNNER_SOURCE = RUNNER_DIR / "runner.py"
