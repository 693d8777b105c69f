"""Runs sandboxed requests: a warm container when one is ready, a cold one otherwise, never reused.

`SandboxExecutor` is what the daemon calls. Per call it takes a pre-started, never-used container
from the warm pool (or starts one), sends the request, returns the answer as soon as it is
complete, then destroys that container in the background and tops the pool up again. A background
task expires pooled containers that idled past their TTL and periodically reaps containers of this
daemon instance that nothing tracks any more.

The one kind of container that outlives its request is an MCP server kept for a session (`open`,
`ask`, `release`): its owner decides when it goes, and `close` removes it with the rest.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os.path
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from pathlib import Path

from sandbox import after_answer, timeline
from sandbox.backend import (
    EgressGate,
    McpSessionCall,
    McpSessionRequest,
    OutputCallback,
    Sandbox,
    SandboxBackend,
    SandboxNotDelivered,
    SandboxRequest,
    SandboxResult,
    SandboxSpec,
    SandboxStartError,
    WriteFileRequest,
)
from sandbox.memory import MemoryBudget, Reservation
from sandbox.pool import WarmPool
from sandbox.socket_memory import reserved_mb

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExecutorStats:
    """Counters since the executor was made (a snapshot)."""

    pool_hits: int = 0
    """Calls served by a warm container."""
    pool_misses: int = 0
    """Calls that had to start a container first (cold path)."""
    started: int = 0
    """Containers started (cold and for the pool)."""
    removed: int = 0
    """Containers destroyed."""
    reaped: int = 0
    """Untracked leftovers removed by the periodic reaper."""
    not_delivered: int = 0
    """Warm containers found dead when a call took them (the call then went cold)."""
    pooled: int = 0
    """Containers ready in the pool right now."""
    in_flight: int = 0
    """Containers running a request right now."""
    memory_held_mb: int = 0
    """Memory the containers of calls hold now (their limits, until each is removed)."""
    memory_budget_mb: int = 0
    """What they may hold together (0: no budget)."""
    memory_refused: int = 0
    """Calls refused because their container did not fit in the memory budget."""


def pool_key(spec: SandboxSpec) -> Hashable:
    """Containers are interchangeable when workspace, identity and container limits match,
    whatever the session and the timeout (enforced per request, not part of the container's
    configuration)."""
    workspace, workspace_id, run_as, limits, image, read_only, pins, shared, owner = (
        spec.profile_key()
    )
    limits_key = tuple(sorted(limits.model_dump(exclude={"timeout_ms"}).items()))
    return (
        workspace,
        workspace_id,
        run_as,
        limits_key,
        image,
        read_only,
        pins,
        shared,
        owner,
        spec.pool_owner,
    )


def _owner_of(key: Hashable) -> Hashable:
    """Whose share of the pool a `pool_key` counts against (its last part)."""
    return key[-1] if isinstance(key, tuple) and key else None


LINGERING_LOOK_S = 5.0
"""How often containers whose removal failed are looked for (their memory is held till gone)."""

_DISCARDED_KEPT = 1024
"""How many discarded workspaces are remembered (a late refill for an older one is harmless)."""


def _workspace_of(key: Hashable) -> str | None:
    """The workspace a pool key is for (keys are `pool_key` tuples, workspace first)."""
    return str(key[0]) if isinstance(key, tuple) and key else None


def _unbound(spec: SandboxSpec) -> SandboxSpec:
    """The spec a pooled container starts with: it serves no session or call yet, and labels
    cannot change after creation, so it carries neither (cold containers carry both)."""
    return spec.model_copy(update={"session_id": ""})


def outside_workspace(spec: SandboxSpec, request: SandboxRequest) -> str:
    """Why the request's path is not inside the workspace, or "" when it is.

    Lexical only: the daemon confines paths (symbolic links included) before it builds a
    request, and inside the container nothing but the workspace is writable anyway.
    """
    if isinstance(request, McpSessionCall):
        return ""  # no path: it goes to a server already started inside the workspace
    path = request.path if isinstance(request, WriteFileRequest) else request.cwd
    what = "path" if isinstance(request, WriteFileRequest) else "working directory"
    normal = Path(os.path.normpath(path))
    workspace = spec.workspace
    if normal.is_absolute() and (normal == workspace or workspace in normal.parents):
        return ""
    return f"the {what} {path} is not inside the workspace {workspace}; use a path inside it"


class SandboxExecutor:
    """Warm-pooled, one-container-per-call execution of sandbox requests.

    Args:
        backend: Starts and removes containers.
        pool_size: Warm containers kept per profile (0: always cold).
        idle_ttl_s: A warm container unused for this long is destroyed.
        max_pooled: Cap on warm plus starting containers over all profiles.
        max_pooled_per_owner: Each pool owner's (principal's) share of `max_pooled`; when the
            pool is full, one under its share gets room from the owner holding the most.
        reap_interval_s: How often untracked leftovers of this instance are reaped.
        maintenance_interval_s: How often idle warm containers are looked at.
        close_backend: `close()` also closes the backend (which verifies that no container of
            the instance is left).
        memory: The memory budget every call's container reserves its limit from, by the
            spec's owner, until it is removed (None: none).
    """

    def __init__(
        self,
        backend: SandboxBackend,
        *,
        pool_size: int = 2,
        idle_ttl_s: float = 60.0,
        max_pooled: int = 32,
        max_pooled_per_owner: int = 8,
        reap_interval_s: float = 60.0,
        maintenance_interval_s: float = 1.0,
        close_backend: bool = True,
        memory: MemoryBudget | None = None,
    ) -> None:
        self._backend = backend
        self._memory = memory
        self._reserved: dict[Sandbox, Reservation] = {}
        """The memory each call's container holds until it is removed."""
        self._lingering: dict[str, Reservation] = {}
        """The memory of containers the engine could not remove yet, by id."""
        self._close_backend = close_backend
        self._pool = WarmPool(
            size=pool_size,
            idle_ttl_s=idle_ttl_s,
            max_total=max_pooled,
            max_per_owner=max_pooled_per_owner,
            owner_of=_owner_of,
        )
        self._reap_interval_s = reap_interval_s
        self._maintenance_interval_s = maintenance_interval_s
        self._in_flight: set[Sandbox] = set()
        self._kept: set[Sandbox] = set()
        self._retiring: set[Sandbox] = set()
        """Containers whose call is over, to be removed once its answer is sent."""
        self._fills: dict[Hashable, set[asyncio.Task[BaseException | None]]] = {}
        self._discarded: OrderedDict[str, None] = OrderedDict()
        """Workspaces whose session closed (most recent last): no container is pooled for them
        until a call uses them again, so a call or a fill ending after the close starts none for
        a folder that may be gone."""
        self._destroys: dict[Sandbox, asyncio.Task[None]] = {}
        self._doomed: weakref.WeakSet[Sandbox] = weakref.WeakSet()
        self._maintenance: asyncio.Task[None] | None = None
        self._closed = False
        self._counts = {
            "pool_hits": 0,
            "pool_misses": 0,
            "started": 0,
            "removed": 0,
            "reaped": 0,
            "not_delivered": 0,
        }

    def stats(self) -> ExecutorStats:
        """The counters now."""
        memory = self._memory
        return ExecutorStats(
            **self._counts,
            pooled=self._pool.ready(),
            in_flight=len(self._in_flight),
            memory_held_mb=memory.held() if memory else 0,
            memory_budget_mb=memory.total_mb if memory else 0,
            memory_refused=memory.refusals if memory else 0,
        )

    async def run(
        self,
        spec: SandboxSpec,
        request: SandboxRequest,
        *,
        tool_use_id: str = "",
        on_output: OutputCallback | None = None,
        egress: EgressGate | None = None,
        on_start: Callable[[], None] | None = None,
    ) -> SandboxResult:
        """Run one request in a fresh container and return its result.

        `on_output` gets a Bash command's output in chunks while it runs; it must not block.
        `egress` serves the container's connections while it runs (egress network only; without
        it, every connection the command tries ends at once). `on_start` is told each time the
        request goes to a container (a warm one that turns out dead is followed by a cold one).

        Raises:
            SandboxStartError: No container could be started; nothing ran.
            asyncio.CancelledError: The call was cancelled; its container is already removed.
        """
        _, result = await self._run(
            spec, request, tool_use_id, on_output, egress, keep=False, on_start=on_start
        )
        return result

    async def open(
        self,
        spec: SandboxSpec,
        request: McpSessionRequest,
        *,
        tool_use_id: str = "",
        egress: EgressGate | None = None,
    ) -> tuple[Sandbox | None, SandboxResult]:
        """Start an MCP server in a container that stays after it answered: the container
        while the result says `session_open` (then the caller's: `ask` it, `release` it),
        None when the server did not start (its container is already going).

        Raises as `run` does.
        """
        return await self._run(spec, request, tool_use_id, None, egress, keep=True)

    async def ask(
        self,
        sandbox: Sandbox,
        call: McpSessionCall,
        egress: EgressGate | None = None,
        on_output: OutputCallback | None = None,
    ) -> SandboxResult:
        """One call to a kept server; when its server is gone afterwards the container is too.

        Raises:
            SandboxNotDelivered: The container was gone (or released) before the call reached
                it: nothing ran.
        """
        if sandbox not in self._kept:
            raise SandboxNotDelivered("that session's server was already removed")
        self._kept.discard(sandbox)
        return await self._run_on(sandbox, call, on_output, egress, keep=True)

    def release(self, sandbox: Sandbox) -> None:
        """Remove a kept container (its session closed, it idled, or its limits changed)."""
        self._kept.discard(sandbox)
        self._destroy_later([sandbox])

    async def removed(self, sandboxes: list[Sandbox]) -> None:
        """Remove kept containers and return once they are gone (their removal under way
        already, if it is, waited for too)."""
        for sandbox in sandboxes:
            self._kept.discard(sandbox)
        self._destroy_later(sandboxes)
        removals = [task for s in sandboxes if (task := self._destroys.get(s)) is not None]
        if removals:
            await asyncio.wait(removals)

    async def _run(
        self,
        spec: SandboxSpec,
        request: SandboxRequest,
        tool_use_id: str,
        on_output: OutputCallback | None,
        egress: EgressGate | None,
        *,
        keep: bool,
        on_start: Callable[[], None] | None = None,
    ) -> tuple[Sandbox | None, SandboxResult]:
        self._ensure_open()
        timeline.mark("tool")
        if problem := outside_workspace(spec, request):
            return None, SandboxResult(exit_code=-1, error=problem)
        key = pool_key(spec)
        self._in_use(spec)
        self._destroy_later(self._pool.expire())
        reservation = await self._reserve(spec)
        holder: Sandbox | None = None  # holds the reservation till removed; None: it goes back here
        try:
            sandbox = self._pool.take(key)
            if sandbox is not None:
                timeline.mark("pool_take")
                if on_start is not None:
                    on_start()
                holder = self._hold(sandbox, reservation)
                try:
                    result = await self._run_on(sandbox, request, on_output, egress, keep=keep)
                except SandboxNotDelivered as exc:
                    log.info("warm sandbox unusable, starting a fresh one: %s", exc)
                    self._counts["not_delivered"] += 1
                    self._reserved.pop(sandbox, None)
                    holder = None
                else:
                    self._counts["pool_hits"] += 1
                    return self._owned(sandbox, result)
            self._counts["pool_misses"] += 1
            sandbox = await self._start(spec, tool_use_id)
            timeline.mark("cold_start")
            if on_start is not None:
                on_start()
            holder = self._hold(sandbox, reservation)
            try:
                result = await self._run_on(sandbox, request, on_output, egress, keep=keep)
            except SandboxNotDelivered as exc:
                raise SandboxStartError(
                    f"the sandbox container ended before it got the request ({exc}); nothing "
                    "ran, retry the call"
                ) from exc
            return self._owned(sandbox, result)
        finally:
            if holder is None:
                self._memory_back(reservation)
            # After the call's answer, not before: starting containers competes for CPU with it.
            after_answer.later(lambda: self._refill_open(key, spec))

    async def _reserve(self, spec: SandboxSpec) -> Reservation | None:
        if self._memory is None:
            return None
        memory_mb = reserved_mb(spec.limits.memory_mb)
        reservation = await self._memory.reserve(spec.pool_owner, memory_mb)
        if self._closed:
            self._memory.release(reservation)
            raise SandboxStartError("the sandbox executor is closed (the daemon is shutting down)")
        return reservation

    def _hold(self, sandbox: Sandbox, reservation: Reservation | None) -> Sandbox:
        """The container holds the call's memory from now until it is removed; it is returned."""
        if reservation is not None:
            self._reserved[sandbox] = reservation
        return sandbox

    def _memory_back(self, reservation: Reservation | None) -> None:
        if self._memory is not None and reservation is not None:
            self._memory.release(reservation)

    def _owned(
        self, sandbox: Sandbox, result: SandboxResult
    ) -> tuple[Sandbox | None, SandboxResult]:
        return (sandbox if sandbox in self._kept else None), result

    async def warm(self, spec: SandboxSpec) -> int:
        """Fill the pool for this profile and wait until it is; returns how many are ready.

        Raises:
            SandboxStartError: A container could not be started (e.g. the image is missing).
        """
        self._ensure_open()
        key = pool_key(spec)
        self._in_use(spec)
        self._refill(key, spec)
        outcomes = await asyncio.gather(*self._fills.get(key, ()))
        for outcome in outcomes:
            if outcome is not None:
                raise outcome
        return self._pool.ready(key)

    async def healthy(self) -> bool:
        """Whether the container engine answers."""
        return await self._backend.ping()

    async def discard_workspace(self, workspace: str) -> int:
        """Destroy the warm containers kept for a workspace (its session closed), and pool none
        for it until a call uses it again; how many were destroyed."""
        self._discarded[workspace] = None
        self._discarded.move_to_end(workspace)
        while len(self._discarded) > _DISCARDED_KEPT:
            self._discarded.popitem(last=False)
        doomed = self._pool.drain_keys(lambda key: _workspace_of(key) == workspace)
        self._destroy_later(doomed)
        return len(doomed)

    async def close(self) -> None:
        """Destroy every container of this executor (pooled, starting, in flight) and stop.

        Calls still running get a result marked cancelled.
        """
        if self._closed:
            return
        self._closed = True
        if self._memory is not None:
            self._memory.close()
        if self._maintenance is not None:
            self._maintenance.cancel()
        fills = [task for tasks in self._fills.values() for task in tasks]
        for task in fills:
            task.cancel()
        await asyncio.gather(*fills, return_exceptions=True)
        if self._maintenance is not None:
            await asyncio.gather(self._maintenance, return_exceptions=True)
        self._destroy_later([*self._pool.drain(), *self._in_flight, *self._kept, *self._retiring])
        self._kept.clear()
        self._retiring.clear()
        while self._destroys:
            await asyncio.gather(*list(self._destroys.values()), return_exceptions=True)
        for reservation in self._lingering.values():
            self._memory_back(reservation)
        self._lingering.clear()
        if self._close_backend:
            await self._backend.close()

    # --- internals ------------------------------------------------------------------------------

    def _ensure_open(self) -> None:
        if self._closed:
            raise SandboxStartError("the sandbox executor is closed (the daemon is shutting down)")
        if self._maintenance is None:
            self._maintenance = asyncio.create_task(self._maintain(), name="sandbox-maintenance")

    async def _start(self, spec: SandboxSpec, tool_use_id: str = "") -> Sandbox:
        sandbox = await self._backend.start(spec, tool_use_id=tool_use_id)
        self._counts["started"] += 1
        if self._closed:  # closed while it started: nothing may run any more
            self._destroy_later([sandbox])
            raise SandboxStartError("the sandbox executor is closed (the daemon is shutting down)")
        return sandbox

    async def _run_on(
        self,
        sandbox: Sandbox,
        request: SandboxRequest,
        on_output: OutputCallback | None,
        egress: EgressGate | None,
        *,
        keep: bool = False,
    ) -> SandboxResult:
        self._in_flight.add(sandbox)
        result: SandboxResult | None = None
        try:
            socket_path = sandbox.egress_socket
            if socket_path is None or egress is None:
                result = await sandbox.run(request, on_output)
            else:
                async with egress.listen(socket_path, sandbox.forwarder_uid):
                    result = await sandbox.run(request, on_output)
            if result.leftovers:
                result = await self._removed_first(sandbox, result)
            return result
        finally:
            self._in_flight.discard(sandbox)
            if keep and result is not None and result.session_open and not self._closed:
                self._kept.add(sandbox)
            else:
                self._retire(sandbox)

    async def _removed_first(self, sandbox: Sandbox, result: SandboxResult) -> SandboxResult:
        """A result whose command left processes the runner could not see gone: the container's
        removal (the engine kills what is left, and the PID namespace ends with its last
        process) is done before the call is answered, and the answer says so. An engine that
        cannot kill them either refuses the removal (logged; the reaper tries again later):
        what they finish then may still land after the answer."""
        self._doomed.add(sandbox)
        await self._destroy(sandbox)
        note = (
            f"{result.leftovers} process(es) the command left were still there long after they "
            "were killed (stuck in the kernel), so its container was removed before this answer."
        )
        return result.model_copy(update={"error": f"{result.error}\n{note}".strip()})

    def _retire(self, sandbox: Sandbox) -> None:
        """Remove a container whose call is over, once its answer is sent (`close` removes it
        if that comes first)."""
        self._retiring.add(sandbox)

        def remove() -> None:
            if sandbox in self._retiring:
                self._retiring.discard(sandbox)
                self._destroy_later([sandbox])

        after_answer.later(remove)

    def _in_use(self, spec: SandboxSpec) -> None:
        self._discarded.pop(str(spec.workspace), None)

    def _refill_open(self, key: Hashable, spec: SandboxSpec) -> None:
        if not self._closed:
            self._refill(key, spec)

    def _refill(self, key: Hashable, spec: SandboxSpec) -> None:
        if _workspace_of(key) in self._discarded:
            return
        self._destroy_later(self._pool.make_room(key))
        for _ in range(self._pool.deficit(key)):
            self._pool.starting(key, 1)
            task = asyncio.create_task(self._fill_one(key, spec), name="sandbox-pool-fill")
            tasks = self._fills.setdefault(key, set())
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    async def _fill_one(self, key: Hashable, spec: SandboxSpec) -> BaseException | None:
        try:
            sandbox = await self._start(_unbound(spec))
        except SandboxStartError as exc:
            if _workspace_of(key) in self._discarded:
                return None  # its folder went with its session: nothing is missing
            log.warning("could not pre-start a sandbox: %s", exc)
            return exc
        finally:
            self._pool.starting(key, -1)
        discarded = _workspace_of(key) in self._discarded
        if self._closed or discarded or not self._pool.add(key, sandbox):
            self._destroy_later([sandbox])
        return None

    def _destroy_later(self, sandboxes: Iterable[Sandbox]) -> None:
        for sandbox in sandboxes:
            if sandbox in self._doomed:
                continue  # each container is destroyed (and counted) once
            self._doomed.add(sandbox)
            task = asyncio.create_task(self._destroy(sandbox), name="sandbox-destroy")
            self._destroys[sandbox] = task
            task.add_done_callback(functools.partial(_forget, self._destroys, sandbox))

    async def _destroy(self, sandbox: Sandbox) -> None:
        try:
            await sandbox.destroy()
        finally:
            reservation = self._reserved.pop(sandbox, None)
            if sandbox.gone or self._closed:
                self._memory_back(reservation)
            elif reservation is not None:  # still there: it may still hold that memory
                self._lingering[sandbox.id] = reservation
        self._counts["removed"] += 1

    async def _forget_removed(self) -> None:
        """Memory of containers whose removal failed goes back once the engine (or the periodic
        sweep) has them gone."""
        for sandbox_id, reservation in list(self._lingering.items()):
            try:
                there = await self._backend.exists(sandbox_id)
            except Exception:
                log.warning("could not look for sandbox %s", sandbox_id[:12], exc_info=True)
                continue
            if not there and self._lingering.pop(sandbox_id, None) is not None:
                self._memory_back(reservation)

    async def _maintain(self) -> None:
        next_reap = time.monotonic() + self._reap_interval_s
        next_look = time.monotonic()
        while True:
            await asyncio.sleep(self._maintenance_interval_s)
            self._destroy_later(self._pool.expire())
            if self._lingering and time.monotonic() >= next_look:
                next_look = time.monotonic() + LINGERING_LOOK_S
                await self._forget_removed()
            if time.monotonic() < next_reap:
                continue
            next_reap = time.monotonic() + self._reap_interval_s
            try:
                self._counts["reaped"] += await self._backend.reap_untracked()
            except Exception:  # a failed sweep is retried at the next interval
                log.warning("periodic sandbox reaping failed", exc_info=True)


def _forget(destroys: dict[Sandbox, asyncio.Task[None]], sandbox: Sandbox, _: object) -> None:
    destroys.pop(sandbox, None)
