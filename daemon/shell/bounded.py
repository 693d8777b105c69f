"""Parsing a long command line in a child process the daemon can stop.

tree-sitter's error recovery holds the GIL, is never interrupted by the parser's progress
callback, and grows with the square of the line's length: 2 KB of `a|` took 77 ms and 16 KB
1.6 s, past `TIME_BUDGET_S`, during which no other thread of the daemon ran (attacker round 55
froze the daemon for 5 s with one 32 KB command). A short line is parsed in the calling thread;
a longer one is sent to one child process, which is killed when it overruns its deadline (and
started again for the next line). Lines wait for the child in turn, a bounded time, and each
owner (principal) has at most one long line waiting or parsed at once: one principal's flood of
long lines can neither hold every worker thread of the daemon nor keep another's lines out
(attacker round 56 made other principals' harmless long lines come back unparsed).
"""

from __future__ import annotations

import multiprocessing
import threading
from collections import deque
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess

from daemon.shell.model import ParsedCommand
from daemon.shell.parse import TIME_BUDGET_S, parse_command

IN_THREAD_CHARS = 512
"""Lines up to this length are parsed in the calling thread (at most a few milliseconds)."""
DEADLINE_S = 2 * TIME_BUDGET_S
"""How long the child may take over one line, its answer included."""
START_S = 30.0
"""How long the child may take to start (importing the parser)."""


def parse_bounded(raw: str, owner: str) -> ParsedCommand:
    """`parse_command`, never holding the caller past about DEADLINE_S (or three times that while
    other owners' long lines are parsed). Blocking: call it from a worker thread."""
    if len(raw) <= IN_THREAD_CHARS:
        return parse_command(raw)
    return _CHILD.parse(raw, owner)


def _serve(connection: Connection) -> None:
    """The child: answers each line with its parse until the daemon hangs up."""
    connection.send(None)  # started
    while True:
        try:
            raw = connection.recv()
        except EOFError:
            return
        connection.send(parse_command(raw))


def _unparsed(raw: str, why: str) -> ParsedCommand:
    return ParsedCommand(raw, False, why, (), ())


class _Turns:
    """Who uses the child next: first come, first served, one line per owner at a time."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._owners: deque[str] = deque()
        """Owners with a line in, in order of arrival; the first one's line has the child."""

    def take(self, owner: str, timeout_s: float) -> str:
        """Waits for the owner's turn: "" once it has the child, else why it does not."""
        with self._condition:
            if owner in self._owners:
                return (
                    "Another long command of yours is being parsed; send long commands one at a "
                    "time, or write them to a script file and run that."
                )
            self._owners.append(owner)
            if self._condition.wait_for(lambda: self._owners[0] == owner, timeout_s):
                return ""
            self._owners.remove(owner)
            self._condition.notify_all()
            return (
                "The command parser is busy with other long commands; retry in a moment, or "
                "write the commands to a script file and run that."
            )

    def give_back(self) -> None:
        with self._condition:
            self._owners.popleft()
            self._condition.notify_all()


class _Child:
    def __init__(self, serve: Callable[[Connection], None] = _serve) -> None:
        self._serve = serve
        """What the child runs (a module-level function: the spawned child imports it)."""
        self._turns = _Turns()
        self._process: BaseProcess | None = None
        self._connection: Connection | None = None

    def parse(self, raw: str, owner: str) -> ParsedCommand:
        refused = self._turns.take(owner, 3 * DEADLINE_S)
        if refused:
            return _unparsed(raw, refused)
        try:
            connection = self._started()
            if connection is None:
                return _unparsed(raw, "The command parser could not be started; retry later.")
            connection.send(raw)
            if connection.poll(DEADLINE_S):
                answer: ParsedCommand = connection.recv()
                return answer
            self._stop()
            return _unparsed(
                raw,
                f"Parsing took longer than {DEADLINE_S} s and was stopped; simplify the command "
                "or split it.",
            )
        except (EOFError, OSError):
            self._stop()
            return _unparsed(raw, "The command parser stopped; retry in a moment.")
        finally:
            self._turns.give_back()

    def _started(self) -> Connection | None:
        if self._connection is not None:
            return self._connection
        # spawn: a fork of a threaded daemon could copy a lock some thread holds.
        context = multiprocessing.get_context("spawn")
        ours, theirs = context.Pipe()
        process = context.Process(target=self._serve, args=(theirs,), daemon=True)
        process.start()
        theirs.close()
        if not ours.poll(START_S):
            process.kill()
            process.join()
            ours.close()
            return None
        ours.recv()
        self._process, self._connection = process, ours
        return ours

    def _stop(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.join()
        if self._connection is not None:
            self._connection.close()
        self._process = self._connection = None


_CHILD = _Child()
