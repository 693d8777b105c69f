"""A long Bash line is parsed in a child process that is killed when it overruns, and started
again for the next line; a short one in the calling thread."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection

from daemon.shell import bounded
from daemon.shell.bounded import IN_THREAD_CHARS, parse_bounded
from daemon.shell.parse import parse_command


def _answers_once_then_hangs(connection: Connection) -> None:
    """A child that parses the first line and never answers the second: an overrun that does not
    depend on how fast tree-sitter gives up on this machine."""
    connection.send(None)
    connection.send(parse_command(connection.recv()))
    connection.recv()
    time.sleep(600)


def test_a_long_line_is_parsed_as_in_process_and_an_overrun_is_stopped() -> None:
    """The CI once saw tree-sitter's own time budget answer the slow line first (its message also
    says "was stopped") and the child live on: the overrun is now made, not hoped for."""
    child = bounded._Child(_answers_once_then_hangs)
    long_line = "echo " + "x" * IN_THREAD_CHARS + " | wc -c > out.txt"
    assert child.parse(long_line, "p") == parse_command(long_line)
    first = child._process
    assert first is not None and first.is_alive()
    overrun = child.parse(long_line, "p")
    assert not overrun.parsed
    assert f"longer than {bounded.DEADLINE_S} s" in overrun.parse_error
    assert not first.is_alive(), "the overrunning child was not killed"
    # The next line gets a new child.
    assert child.parse(long_line, "p").parsed
    assert child._process is not None and child._process is not first
    child._stop()


def test_a_line_tree_sitter_cannot_finish_in_time_comes_back_unparsed() -> None:
    slow = parse_bounded("a|" * 16_383, "p")  # seconds of tree-sitter error recovery
    assert not slow.parsed and "was stopped" in slow.parse_error


def test_a_short_line_starts_no_child() -> None:
    bounded._CHILD._stop()
    assert parse_bounded("ls -la", "p").parsed
    assert bounded._CHILD._process is None


def test_one_owners_flood_of_slow_lines_does_not_keep_anothers_line_out() -> None:
    """Attacker round 56: one principal's many slow long lines held the one parser child (and a
    worker thread each) so another principal's harmless long line came back unparsed."""
    slow = "a|" * 16_383
    harmless = "echo " + "x" * IN_THREAD_CHARS + " > out.txt"
    with ThreadPoolExecutor(6) as pool:
        flood = [pool.submit(parse_bounded, slow, "flooder") for _ in range(4)]
        time.sleep(0.05)
        victim = pool.submit(parse_bounded, harmless, "victim").result()
        floods = [f.result() for f in flood]
    assert victim.parsed, victim.parse_error
    assert [c.argv[0] for c in victim.simple_commands] == ["echo"]
    refused = [f for f in floods if "Another long command of yours" in f.parse_error]
    assert len(refused) >= 2 and all(not f.parsed for f in floods)


def test_turns_go_in_order_of_arrival_and_a_waiter_that_gives_up_leaves_the_queue() -> None:
    turns = bounded._Turns()
    assert turns.take("a", 1) == ""
    order: list[str] = []

    def wait_turn(owner: str) -> None:
        if turns.take(owner, 5) == "":
            order.append(owner)
            turns.give_back()

    waiters = [threading.Thread(target=wait_turn, args=(owner,)) for owner in ("b", "c")]
    for waiter in waiters:
        waiter.start()
        time.sleep(0.05)
    assert "busy" in turns.take("d", 0.05)  # gave up: must not block those behind it
    assert "Another long command of yours" in turns.take("b", 0.05)
    turns.give_back()
    for waiter in waiters:
        waiter.join(5)
    assert order == ["b", "c"]
    assert turns.take("d", 0.05) == ""
