"""The container's entry point: it imports runner.py instead of running it as the main script,
because a main script is compiled from source at every start (runner.py alone cost each container
9 ms of CPU, measured in the sandbox image) while an imported module is taken from the compiled
form beside it when the daemon staged one (sandbox/runner_stage.py)."""

import sys

import runner  # type: ignore[import-not-found,unused-ignore]

sys.exit(runner.main())
