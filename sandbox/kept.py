"""MCP servers kept for sessions: one container per (session, server), one call at a time.

A stdio MCP server that is not stateless keeps its state between calls, so its container lives
for the session rather than for a call. Each is removed when its session closes, after it idled
for `idle_s`, when the calls of its session are granted other limits (the container has the limits
of the call that started it, so a call never runs with more than its own), and when a cap needs
room for another: each principal has a share (`per_owner`; past it, its own server idle longest
goes) and all together a total (past it, the server idle longest of the principal holding the most
goes). Servers being started count as running. A server that fails to start, or dies in a call, is
started again by a later call, no sooner than its backoff allows.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Hashable
from dataclasses import dataclass, field

from sandbox.backend import (
    EgressGate,
    McpSessionCall,
    McpSessionRequest,
    OutputCallback,
    Sandbox,
    SandboxNotDelivered,
    SandboxResult,
    SandboxSpec,
)
from sandbox.executor import SandboxExecutor, pool_key

log = logging.getLogger(__name__)

BACKOFF_S = (0.0, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
"""Wait before the next start after 1, 2, ... failures in a row (one crash costs nothing)."""


@dataclass(frozen=True)
class _Run:
    """One call to a kept server, as the caller asked it."""

    opening: McpSessionRequest
    call: McpSessionCall
    tool_use_id: str
    egress: EgressGate | None
    on_output: OutputCallback | None


@dataclass
class _Kept:
    """One (session, server) slot."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    sandbox: Sandbox | None = None
    profile: Hashable = None
    last_used: float = 0.0
    failures: int = 0
    retry_at: float = 0.0
    gone: bool = False
    """Its session closed (or the keeper did) while a call held it: keep nothing more."""
    owner: str = ""
    """The principal whose session it serves."""
    starting: bool = False
    """Its container is being started (it counts against the caps already)."""

    @property
    def running(self) -> bool:
        return self.sandbox is not None or self.starting

    def failed(self, now: float) -> None:
        self.failures += 1
        self.retry_at = now + BACKOFF_S[min(self.failures, len(BACKOFF_S)) - 1]


class KeptServers:
    """The kept servers of one executor.

    Args:
        executor: Starts, asks and removes the containers.
        max_kept: Servers kept at once over all sessions (0: none is kept; each call starts
            its server and the container goes with the call).
        per_owner: Servers one principal's sessions may keep at once.
        idle_s: A server unused this long is stopped.
    """

    def __init__(
        self, executor: SandboxExecutor, *, max_kept: int, idle_s: float, per_owner: int = 4
    ) -> None:
        self._executor = executor
        self._max = max_kept
        self._per_owner = max(1, per_owner)
        self._idle_s = idle_s
        self._slots: dict[tuple[str, str], _Kept] = {}
        self._sweeper: asyncio.Task[None] | None = None

    def live(self, owner: str | None = None) -> int:
        """Servers running (or being started) now, of everyone or of one principal."""
        return sum(
            1
            for slot in self._slots.values()
            if slot.running and (owner is None or slot.owner == owner)
        )

    async def call(
        self,
        spec: SandboxSpec,
        server: str,
        opening: McpSessionRequest,
        call: McpSessionCall,
        *,
        tool_use_id: str = "",
        egress: EgressGate | None = None,
        on_output: OutputCallback | None = None,
        owner: str = "",
    ) -> SandboxResult:
        """`call` on the session's `server` (started with `opening` when it is not running);
        `on_output` gets its progress; `owner` is the session's principal.

        Calls to one server of one session wait for each other, within the call's timeout.

        Raises:
            SandboxStartError: No container could be started (nothing ran).
        """
        run = _Run(opening, call, tool_use_id, egress, on_output)
        if self._max == 0:
            return await self._once(spec, run)
        self._sweep_later()
        slot = self._slots.setdefault((spec.session_id, server), _Kept(owner=owner))
        try:
            async with asyncio.timeout(call.timeout_ms / 1000):
                await slot.lock.acquire()
        except TimeoutError:
            return SandboxResult(
                exit_code=-1,
                timed_out=True,
                error=f"the MCP server {server} was busy with this session's earlier calls "
                "for the whole timeout; nothing was sent to it",
            )
        try:
            return await self._call_locked(slot, spec, server, run)
        finally:
            slot.last_used = time.monotonic()
            slot.lock.release()

    async def _call_locked(
        self, slot: _Kept, spec: SandboxSpec, server: str, run: _Run
    ) -> SandboxResult:
        if slot.sandbox is not None and slot.profile != pool_key(spec):
            log.info("MCP server %s: this call's limits differ; starting it afresh", server)
            self._release(slot)
        for _ in range(2):  # a container found gone before the call reached it: once more
            if slot.gone:
                return SandboxResult(exit_code=-1, cancelled=True, error="the session closed")
            if slot.sandbox is None:
                refused = self._start_refusal(slot, server)
                if refused:
                    return SandboxResult(exit_code=-1, error=refused)
                slot.starting = True
                try:
                    sandbox, opened = await self._executor.open(
                        spec, run.opening, tool_use_id=run.tool_use_id, egress=run.egress
                    )
                finally:
                    slot.starting = False
                if sandbox is None:
                    slot.failed(time.monotonic())
                    return opened
                slot.sandbox, slot.profile, slot.failures = sandbox, pool_key(spec), 0
            try:
                result = await self._executor.ask(slot.sandbox, run.call, run.egress, run.on_output)
            except SandboxNotDelivered:
                slot.sandbox = None
                continue
            if not result.session_open:
                slot.sandbox = None  # the executor removed its container
                slot.failed(time.monotonic())
            elif slot.gone:
                self._release(slot)
            return result
        return SandboxResult(
            exit_code=-1, error=f"the MCP server {server} ended before it got the call"
        )

    def _start_refusal(self, slot: _Kept, server: str) -> str:
        """Why the server may not be started now ("" when it may), making room when needed."""
        wait = slot.retry_at - time.monotonic()
        if wait > 0:
            return (
                f"the MCP server {server} failed {slot.failures} times in a row; it is started "
                f"again in {wait:.0f} s (call it then)"
            )
        if self.live(slot.owner) >= self._per_owner:
            if self._release_idle([s for s in self._slots.values() if s.owner == slot.owner]):
                return ""
            return (
                f"this principal's sessions have {self._per_owner} MCP servers running, all "
                "busy (the daemon's kept_servers_per_principal); try again when one has answered"
            )
        if self.live() < self._max:
            return ""
        holders: dict[str, int] = {}
        for other in self._slots.values():
            if other.running:
                holders[other.owner] = holders.get(other.owner, 0) + 1
        for owner in sorted(holders, key=lambda name: -holders[name]):
            if self._release_idle([s for s in self._slots.values() if s.owner == owner]):
                return ""
        return (
            f"{self._max} MCP servers are running for sessions, all busy (the daemon's "
            "kept_servers_max); try again when one has answered"
        )

    def _release_idle(self, slots: list[_Kept]) -> bool:
        """Stop the one of `slots` idle longest; False when none is idle."""
        idle = [s for s in slots if s.sandbox is not None and not s.lock.locked()]
        if not idle:
            return False
        self._release(min(idle, key=lambda other: other.last_used))
        return True

    async def _once(self, spec: SandboxSpec, run: _Run) -> SandboxResult:
        sandbox, opened = await self._executor.open(
            spec, run.opening, tool_use_id=run.tool_use_id, egress=run.egress
        )
        if sandbox is None:
            return opened
        try:
            return await self._executor.ask(sandbox, run.call, run.egress, run.on_output)
        finally:
            self._executor.release(sandbox)

    def _release(self, slot: _Kept) -> None:
        if slot.sandbox is not None:
            self._executor.release(slot.sandbox)
            slot.sandbox = None

    async def remove_session(self, session_id: str) -> int:
        """Stop the session's servers (a call still running with one ends as cancelled) and
        return once their containers are gone: nothing a server does lands in its workspace
        after the session closed (attacker round 98)."""
        doomed = []
        for key in [key for key in self._slots if key[0] == session_id]:
            slot = self._slots.pop(key)
            slot.gone = True
            if slot.sandbox is not None:
                doomed.append(slot.sandbox)
                slot.sandbox = None
        await self._executor.removed(doomed)
        return len(doomed)

    def _sweep_later(self) -> None:
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.create_task(self._sweep(), name="kept-servers-idle")

    async def _sweep(self) -> None:
        """Stop servers idle past `idle_s`; forget empty slots; end when nothing is kept."""
        while self._slots:
            await asyncio.sleep(min(self._idle_s, 5.0))
            now = time.monotonic()
            for key, slot in list(self._slots.items()):
                if slot.lock.locked() or now - slot.last_used < self._idle_s:
                    continue
                self._release(slot)
                if slot.retry_at <= now:
                    del self._slots[key]

    async def close(self) -> None:
        """Stop every kept server."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        for slot in self._slots.values():
            slot.gone = True
            self._release(slot)
        self._slots.clear()
