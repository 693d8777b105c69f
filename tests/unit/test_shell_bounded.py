"""A long Bash line is parsed in a child process that is killed when it overruns, and started
again for the next line; a short one in the calling thread."""

from __future__ import annotations

from daemon.shell import bounded
from daemon.shell.bounded import IN_THREAD_CHARS, parse_bounded
from daemon.shell.parse import parse_command


def test_a_long_line_is_parsed_as_in_process_and_an_overrun_is_stopped() -> None:
    long_line = "echo " + "x" * IN_THREAD_CHARS + " | wc -c > out.txt"
    assert parse_bounded(long_line) == parse_command(long_line)
    child = bounded._CHILD._process
    assert child is not None and child.is_alive()
    slow = parse_bounded("a|" * 16_383)  # seconds of tree-sitter error recovery
    assert not slow.parsed and "was stopped" in slow.parse_error
    assert not child.is_alive(), "the overrunning child was not killed"
    # The next line gets a new child.
    assert parse_bounded(long_line).parsed
    assert bounded._CHILD._process is not None and bounded._CHILD._process.is_alive()


def test_a_short_line_starts_no_child() -> None:
    bounded._CHILD._stop()
    assert parse_bounded("ls -la").parsed
    assert bounded._CHILD._process is None
