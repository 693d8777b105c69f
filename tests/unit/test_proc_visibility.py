"""Reading whether the host's /proc shows every process to every user (no Docker)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from daemon.host.proc_visibility import hides_processes, warn_when_commands_show

ROOT = "21 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw"
PLAIN = "22 27 0:21 / /proc rw,relatime shared:12 - proc proc rw"


@pytest.mark.parametrize(
    ("table", "hidden"),
    [
        ([ROOT, PLAIN], False),
        ([ROOT, PLAIN.replace(" - proc proc rw", " - proc proc rw,hidepid=invisible")], True),
        ([ROOT, PLAIN.replace(" - proc proc rw", " - proc proc rw,hidepid=2,gid=4")], True),
        ([ROOT, PLAIN.replace(" - proc proc rw", " - proc proc rw,hidepid=noaccess")], True),
        ([ROOT, PLAIN.replace(" - proc proc rw", " - proc proc rw,hidepid=0")], False),
        # A procfs mounted over the first: the last one is what users see.
        ([ROOT, PLAIN + ",hidepid=invisible", PLAIN], False),
        # Something else at /proc, or no /proc at all: nothing to say.
        ([ROOT, "30 27 0:50 / /proc rw - tmpfs tmpfs rw"], None),
        ([ROOT], None),
        (["garbage", "1 2 3"], None),
    ],
)
def test_hidepid_is_read_from_the_proc_mount(table: list[str], hidden: bool | None) -> None:
    assert hides_processes("\n".join(table)) is hidden


def test_the_start_names_a_host_that_shows_commands(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="daemon.host.proc_visibility")
    table = tmp_path / "mountinfo"
    table.write_text(f"{ROOT}\n{PLAIN}\n")
    assert warn_when_commands_show(table)
    assert "hidepid=invisible" in caplog.text
    table.write_text(f"{ROOT}\n{PLAIN},hidepid=invisible\n")
    assert not warn_when_commands_show(table)
    assert not warn_when_commands_show(tmp_path / "unreadable")
