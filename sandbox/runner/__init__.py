"""The runner that executes one request inside a sandbox container.

`runner.py` is not imported by the daemon at run time: it is bind-mounted read-only into every
container and run there by the image's python3, so it uses the standard library only.
"""

from __future__ import annotations

from pathlib import Path

#: The runner's source file on the host, bind-mounted into every container.
RUNNER_SOURCE = Path(__file__).resolve().with_name("runner.py")
