"""Work a call leaves behind (removing its container, refilling the warm pool, looking at its
workspace's repository again), held until the call's answer is on its way.

That work starts containers and asks the engine to remove others: on a 2-core machine it competes
for the CPU with the answer's last steps (mapping the result, the audit line, gRPC, the client
waking up). In the benchmark's warm Bash calls (`bench --only sandbox`, four runs before, two
after), the p50 went from 13.6-15.2 ms to 10.1-10.3 ms once that work waited for the answer.

Whoever answers a call holds (`holding`) while it works on the call and releases the holder once
the answer is sent; work handed to `later` meanwhile, by the call or the tasks it starts, waits
for that. Without a holder (a batch's calls, which want the pool refilled while the batch goes
on; work outside a call) and after the release, `later` runs its work at once. Nothing of the
call itself waits: what the call left running was killed before it answered
(sandbox/runner/runner.py, `end_leftovers`), and the container's init ends with the runner, so a
container that waits a little longer to be removed holds nothing of the model's running.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator
from contextvars import ContextVar

log = logging.getLogger(__name__)

RELEASE_AFTER_S = 1.0
"""A holder not released this long after its call was answered (an answer still being sent to a
client that reads slowly, or never) lets its work go: containers left waiting for their removal
cost the engine."""

Job = Callable[[], None]


class Held:
    """Work waiting for one answer to be sent."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._jobs: list[Job] = []
        self._released = False
        self._fallback: asyncio.TimerHandle | None = None

    def answered(self) -> None:
        """The call's answer is on its way: the work goes at the release, or RELEASE_AFTER_S
        from now at the latest."""
        if not self._released and self._fallback is None:
            self._fallback = self._loop.call_later(RELEASE_AFTER_S, self.release)

    def add(self, job: Job) -> bool:
        """Keep `job` for the release; False once released (the caller runs it itself)."""
        if self._released:
            return False
        self._jobs.append(job)
        return True

    def release(self) -> None:
        """Run the work held (once; later calls do nothing). Safe from any thread: the work
        runs on the holder's event loop."""
        if self._loop.is_closed():
            return
        if self._loop is _running_loop():
            self._run_held()
        else:
            self._loop.call_soon_threadsafe(self._run_held)

    def _run_held(self) -> None:
        if self._released:
            return
        self._released = True
        if self._fallback is not None:
            self._fallback.cancel()
        jobs, self._jobs = self._jobs, []
        for job in jobs:
            _run(job)


_holder: ContextVar[Held | None] = ContextVar("after_answer", default=None)


@contextlib.contextmanager
def holding() -> Iterator[Held]:
    """Within: what a call leaves behind (in this task, or in tasks started from it) waits until
    the holder yielded is released, or RELEASE_AFTER_S after the block is left (the call
    answered). Enter it on the event loop, in the task answering the call."""
    held = Held(asyncio.get_running_loop())
    token = _holder.set(held)
    try:
        yield held
    finally:
        held.answered()
        # A stream the client cancelled is closed by grpc from a context of its own: the
        # holder's context, where it would be reset, is no longer the one running (attacker
        # round 98: a ValueError logged at every such cancel).
        with contextlib.suppress(ValueError):
            _holder.reset(token)


def later(job: Job) -> None:
    """Run `job` once the answer under way is sent: now when nothing holds it. Call it on the
    event loop; an exception it raises is logged, never the caller's."""
    held = _holder.get()
    if held is None or not held.add(job):
        _run(job)


def _run(job: Job) -> None:
    try:
        job()
    except Exception:
        log.exception("work left behind by a call failed")


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
