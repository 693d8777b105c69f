"""The set-up scripts' long-step runner (scripts/lib.sh run_step): its heartbeat shows the log's
last line, and what it prints stays valid UTF-8 whatever the step writes (a CI run's install test
failed decoding a progress bar cut in the middle of a character)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from daemon.config import PROJECT_ROOT


def test_the_heartbeat_prints_valid_text_whatever_the_step_writes(tmp_path: Path) -> None:
    step = "printf 'pulling \\342\\224\\201\\342\\224\\201\\342 half\\n'; sleep 2.5"
    script = (
        f"source {PROJECT_ROOT / 'scripts' / 'lib.sh'}; HEARTBEAT_SECONDS=1 "
        f"run_step 'a step' {tmp_path / 'step.log'} bash -c \"{step}\""
    )
    done = subprocess.run(["bash", "-c", script], capture_output=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    out = done.stdout.decode("utf-8")  # strict: raises on a cut character
    heartbeats = [line for line in out.splitlines() if "... a step:" in line]
    assert heartbeats and all("pulling ??????? half" in line for line in heartbeats), out
