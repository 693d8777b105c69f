"""Assembles and runs the daemon: policy engine (managed or external OPA), registry, sandbox,
pipeline, scheduler, sessions and the gRPC server with health and reflection.

Every part that needs stopping is entered into one `AsyncExitStack` as it starts, so a failed start
and a normal stop both undo exactly what was started, in reverse order.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import signal
import tempfile
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpc_health.v1 import health_pb2

from daemon import __version__
from daemon.app.egress import start_egress
from daemon.app.sandbox import Sandbox
from daemon.calls.approvals import ApprovalDesk
from daemon.calls.audit import AuditLog
from daemon.calls.idempotency import ResultCache
from daemon.calls.kept_outputs import KeptOutputs
from daemon.calls.pipeline import Pipeline, PipelineLimits
from daemon.calls.scheduler import Scheduler, SchedulerLimits
from daemon.config import PROJECT_ROOT, Settings
from daemon.errors import RequestError, TooljailError
from daemon.hooks.engine import HookEngine
from daemon.host.descriptor_limit import reserve_descriptors
from daemon.models import StatusSnapshot
from daemon.ops import heap
from daemon.ops.metrics import Metrics
from daemon.ops.notify import Notifier, start_watchdog
from daemon.policy.approval import ApprovalAuthority
from daemon.policy.decision_cache import DecisionCache
from daemon.policy.engine import PolicyEngine
from daemon.policy.keys import load_key
from daemon.policy.opa_engine import OpaPolicyEngine
from daemon.policy.opa_server import MAX_SOCKET_PATH, ManagedOpa, find_opa, private_socket_dir
from daemon.policy.reloader import PolicyReloader
from daemon.policy.revision import policy_revision
from daemon.policy.shadow import ShadowedEngine
from daemon.server.admin import AdminService
from daemon.server.grpc_server import SERVICE_NAMES, Servers, build_servers
from daemon.server.health_checks import BoundedHealth
from daemon.server.held_requests import HeldRequests
from daemon.server.identity import CallerResolver
from daemon.server.listen import ListenAddress
from daemon.server.service import ExecutorService, Intake
from daemon.sessions.disk import BudgetedWorkspaces, FreshWorkspaces, PlainWorkspaces
from daemon.sessions.kept_workspaces import KeptWorkspaces
from daemon.sessions.manager import SandboxCleanup, SessionManager
from daemon.sessions.own_defaults import OwnDefaults
from daemon.sessions.principal_uids import LEDGER_NAME, PrincipalUids, UidRange, open_ledger
from daemon.sessions.session import Session
from daemon.sessions.store import SessionStore
from daemon.sessions.workspaces import IdentityRule
from daemon.tools.contract import SandboxRunner
from daemon.tools.mcp.config import McpServerSpec
from daemon.tools.mcp.stdio import McpStdioServer
from daemon.tools.mcp.upstream import McpServerError, McpUpstream
from daemon.tools.registry import ToolRegistry
from daemon.tools.toolset import ToolCatalog, operator_tools
from sandbox.limits import clamp_limits

log = logging.getLogger(__name__)


def instance_id_for(settings: Settings) -> str:
    """Stable per listener, so a restarted daemon finds its predecessor's leftovers."""
    if settings.instance_id:
        return settings.instance_id
    return "tj-" + hashlib.sha256(settings.listen.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class _Policy:
    """The policy engine in force, and what reloads and status need of it."""

    engine: OpaPolicyEngine
    """The serving engine (OPA)."""
    decider: PolicyEngine
    """What decides calls: the engine, or it shadowed by a candidate policy."""
    reloader: PolicyReloader


#: The folder (in the state directory) stdio MCP servers list their tools in, and its session's id.
LISTING_FOLDER = "mcp-listing"
#: At a stop, once the calls in flight are answered, how long their callers have to read the
#: answers before the server closes its connections (within the grace period).
ANSWERS_LINGER_S = 0.25
_DRAIN_POLL_S = 0.05


class Daemon:
    """One running tooljail daemon."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.instance_id = instance_id_for(settings)
        self.address = ListenAddress.parse(settings.listen)
        self.intake = Intake()
        self.metrics = Metrics()
        self.opa: ManagedOpa | None = None
        """The managed OPA while it runs (None with an external one)."""
        self.scheduler: Scheduler | None = None
        self.sessions: SessionManager | None = None
        self._policy: _Policy | None = None
        self._sandbox: Sandbox | None = None
        self._store: SessionStore | None = None
        self._listing: Session | None = None
        self._catalog = ToolCatalog(settings.deferred_tools)
        self._server: Servers | None = None
        self._resolver = CallerResolver(settings.auth)
        self._health = BoundedHealth(self._resolver)
        self._stack: contextlib.AsyncExitStack | None = None
        self._grace_s = settings.shutdown_grace_s

    @property
    def engine(self) -> OpaPolicyEngine | None:
        """The serving policy engine (None before the start)."""
        return self._policy.engine if self._policy else None

    @property
    def shadowed(self) -> ShadowedEngine | None:
        """In shadow mode, the engine that compares the candidate policy with the serving one."""
        decider = self._policy.decider if self._policy else None
        return decider if isinstance(decider, ShadowedEngine) else None

    @property
    def sandbox(self) -> Sandbox | None:
        """The sandbox (None before the start); `sandbox.stats()` is None without an engine."""
        return self._sandbox

    @property
    def reloader(self) -> PolicyReloader | None:
        """Reloads the policy (None before the start)."""
        return self._policy.reloader if self._policy else None

    async def start(self) -> None:
        """Start everything; on failure, stop what was started and raise."""
        async with contextlib.AsyncExitStack() as stack:
            await self._start(stack)
            self._stack = stack.pop_all()

    async def _start(self, stack: contextlib.AsyncExitStack) -> None:
        settings = self.settings
        tcp_listeners = int(self.address.unix_path is None) + int(bool(settings.tcp.address))
        reserve_descriptors(tcp_listeners * settings.tcp.max_connections)
        self.address.prepare()
        stack.callback(self.address.cleanup)
        audit = stack.enter_context(contextlib.closing(AuditLog(settings.audit_log)))
        self._policy = policy = await self._start_policy(stack)
        sessions_root = settings.sessions_root or settings.state_dir / "sessions"
        fresh = self._fresh_workspaces(sessions_root)
        egress = start_egress(settings, policy.engine, audit, self.instance_id)
        self._sandbox = sandbox = await Sandbox.start(settings, self.instance_id, egress, audit)
        stack.push_async_callback(sandbox.stop)
        identities = None
        if settings.sandbox.enabled:
            identities = IdentityRule(
                user=settings.sandbox.user,
                min_uid=settings.sandbox.min_uid,
                run_as_owner=settings.sandbox.run_as_owner,
                principal_uids=_principal_uids(settings),
            )
        try:
            store = SessionStore(
                settings.workspace,
                sessions_root,
                identities,
                state_dir=settings.state_dir,
                max_per_principal=settings.sessions.max_per_principal,
                max_total=settings.sessions.max_total,
                default_workspace_for=_default_workspace_for(settings),
            )
        except RequestError as exc:
            raise TooljailError(f"cannot use the configured workspace: {exc}") from exc
        self._store = store
        # The pool warms for the default workspace (the Unix socket's principal's default).
        sandbox.warm(store.default_for(settings.auth.unix_principal))
        own_defaults = OwnDefaults(store, fresh)
        approval = settings.approval
        key = load_key(
            approval.key.get_secret_value() if approval.key else None,
            approval.key_file or settings.state_dir / "approval.key",
        )
        catalog = self._catalog
        catalog.operator = operator_tools(settings.opa.policies_dir)
        kept = self._kept_outputs()
        registry = catalog.registry()
        pipeline = Pipeline(
            registry=registry,
            policy=policy.decider,
            sessions=store,
            limits=PipelineLimits(
                result_budget_chars=settings.result_budget_chars,
                default_sandbox=settings.sandbox.defaults,
                ceilings=settings.sandbox.ceilings,
            ),
            audit=audit,
            sandbox=sandbox,
            approvals=ApprovalAuthority(key, ttl_s=approval.ttl_s),
            metrics=self.metrics,
            hooks=HookEngine(settings.hooks) if settings.hooks else None,
            kept=kept,
            own_defaults=own_defaults,
        )
        self.metrics.set_known_tools(registry.names())

        def registry_changed(registry: ToolRegistry) -> None:
            pipeline.use_registry(registry)
            self.metrics.set_known_tools(registry.names())

        catalog.on_change = registry_changed
        for spec in settings.mcp_servers:
            upstream = self._upstream(spec, catalog, sandbox, store)
            catalog.add_upstream(upstream)
            upstream.start()
            stack.push_async_callback(upstream.stop)
        sched = settings.scheduler
        self.scheduler = scheduler = Scheduler(
            pipeline,
            SchedulerLimits(
                max_parallel=sched.max_parallel,
                max_in_flight=sched.max_in_flight,
                max_in_flight_per_session=sched.max_in_flight_per_session,
                max_in_flight_per_principal=sched.max_in_flight_per_principal,
                admin_reserve=sched.admin_reserve,
                queue_timeout_s=sched.queue_timeout_s,
                turn_budget_chars=settings.turn_budget_chars,
            ),
            ResultCache(
                ttl_s=sched.replay_ttl_s,
                max_entries=sched.replay_max_entries,
                max_entries_per_principal=sched.replay_max_entries_per_principal,
            ),
        )
        self.sessions = sessions = SessionManager(
            store,
            policy.engine.workspace_refusal,
            policy.engine.mode_refusal,
            scheduler,
            fresh,
            default_idle_ttl_s=settings.session_idle_ttl_s,
            max_idle_ttl_s=settings.sessions.max_idle_ttl_s,
            sandbox_cleanup=_cleanup(sandbox, kept),
            kept=KeptWorkspaces(
                settings.state_dir / "kept-workspaces.json",
                fresh,
                settings.workspaces.keep_closed_s,
                max_per_principal=settings.workspaces.max_kept_per_principal,
            ),
        )
        await stack.enter_async_context(_running(sessions))
        resolver = self._resolver
        server = build_servers(
            settings,
            self.address,
            ExecutorService(
                pipeline,
                scheduler,
                sessions,
                resolver,
                self.intake,
                HeldRequests(settings.max_held_request_bytes, settings.answer_room),
                self.metrics,
            ),
            AdminService(
                policy.reloader,
                resolver,
                self.status,
                sessions,
                ApprovalDesk(pipeline.pending_approvals, policy.decider, audit),
            ),
            self._health,
            resolver,
        )
        self.address.publish(settings.socket_mode, settings.socket_group)
        if settings.metrics.enabled:
            host, _, port = settings.metrics.listen.rpartition(":")
            metrics_server = self.metrics.start_http_server(host, int(port))
            stack.callback(metrics_server.close)
        self.metrics.watch_sandbox(sandbox.stats, asyncio.get_running_loop())
        await server.start()
        self._server = server
        stack.push_async_callback(self._stop_server)
        for name in ("", *SERVICE_NAMES):
            await self._health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info("tooljail listening on %s (instance %s)", settings.listen, self.instance_id)

    def _fresh_workspaces(self, root: Path) -> FreshWorkspaces:
        """Where fresh sessions' workspaces are made: with a disk budget each, unless none is
        configured."""
        config = self.settings.workspaces
        if not config.budget_mb:
            return PlainWorkspaces(root)
        image = config.image or self.settings.state_dir / "workspaces.img"
        return BudgetedWorkspaces(
            root,
            image,
            config.filesystem_mb,
            config.budget_mb,
            config.principal_share,
            marks=self.settings.state_dir / "workspaces-marks.json",
        )

    async def _start_policy(self, stack: contextlib.AsyncExitStack) -> _Policy:
        """The serving OPA (managed or external) and, in shadow mode, the candidate beside it."""
        settings = self.settings
        folder = settings.opa.policies_dir
        binary = None
        if settings.opa.url:
            url = settings.opa.url
        else:
            binary = find_opa(settings.opa.binary, PROJECT_ROOT)
            sockets = self._opa_socket_dir()
            self.opa = opa = ManagedOpa(binary, folder, sockets / "opa.sock")
            await opa.start()
            stack.push_async_callback(opa.stop)
            url = opa.url
        engine = await self._open_engine(stack, url, folder, self.opa)
        decider: PolicyEngine = engine
        shadow_folder = settings.opa.shadow_policies_dir
        if shadow_folder is not None and binary is not None:
            shadow_opa = ManagedOpa(binary, shadow_folder, sockets / "opa-shadow.sock")
            await shadow_opa.start()
            stack.push_async_callback(shadow_opa.stop)
            candidate = await self._open_engine(stack, shadow_opa.url, shadow_folder, shadow_opa)
            shadowed = ShadowedEngine(engine, candidate)
            stack.push_async_callback(shadowed.drain)
            log.info("shadow mode: comparing with the policy in %s", shadow_folder)
            decider = shadowed
        reloader = PolicyReloader(self.opa, engine, binary, folder, tools=self._load_tools)
        return _Policy(engine, decider, reloader)

    def _upstream(
        self, spec: McpServerSpec, catalog: ToolCatalog, sandbox: Sandbox, store: SessionStore
    ) -> McpUpstream | McpStdioServer:
        """An upstream MCP server: over HTTP, or stdio in the sandbox (listed in a folder of the
        daemon's own, mounted read-only)."""
        if not spec.command:
            return McpUpstream(spec, catalog.upstream_tools)
        settings = self.settings

        def listing() -> tuple[SandboxRunner, str] | None:
            try:
                session = self._listing_session(store)
            except RequestError as exc:
                raise McpServerError(f"no folder to list its tools in: {exc}") from exc
            runner = sandbox.runner(session, f"mcp-list-{spec.name}")
            return None if runner is None else (runner, str(session.workspace))

        limits = clamp_limits(settings.sandbox.defaults, settings.sandbox.ceilings)
        return McpStdioServer(spec, catalog.upstream_tools, listing, limits)

    def _listing_session(self, store: SessionStore) -> Session:
        """Where stdio MCP servers list their tools: an empty folder in the state directory,
        never a caller's workspace (made once)."""
        if self._listing is None:
            folder = self.settings.state_dir / LISTING_FOLDER
            self._listing = store.private_session(folder, LISTING_FOLDER)
        return self._listing

    def _kept_outputs(self) -> KeptOutputs | None:
        """Where results over their budget are kept (None when the config says not to)."""
        settings = self.settings
        if settings.kept_outputs_mb == 0:
            return None
        kept = KeptOutputs(
            settings.state_dir / "outputs",
            settings.kept_outputs_mb << 20,
            settings.kept_outputs_total_mb << 20,
        )
        try:
            kept.prepare()
        except OSError as exc:
            raise TooljailError(f"cannot prepare {kept.root} for kept outputs: {exc}") from exc
        return kept

    def _load_tools(self) -> Callable[[], None]:
        """The policy folder's tools as a reload finds them (ToolDefinitionError), and how to
        put them in force."""
        return self._catalog.prepare_operator(operator_tools(self.settings.opa.policies_dir))

    def _opa_socket_dir(self) -> Path:
        """A directory only the daemon's user may enter, for the managed OPA's sockets:
        <state_dir>/opa, or a private temporary one when that path is too long for a socket."""
        folder = self.settings.state_dir / "opa"
        if len(os.fsencode(folder / "opa-shadow.sock")) > MAX_SOCKET_PATH:
            folder = Path(tempfile.mkdtemp(prefix="tooljail-opa-"))
        return private_socket_dir(folder)

    async def _open_engine(
        self,
        stack: contextlib.AsyncExitStack,
        url: str,
        folder: Path,
        opa: ManagedOpa | None,
    ) -> OpaPolicyEngine:
        settings = self.settings.opa
        engine = OpaPolicyEngine(
            url,
            settings.timeout_s,
            self.settings.sandbox.defaults,
            await policy_revision(folder),
            on_error=self.metrics.opa_error if opa is self.opa else None,
            loading=lambda: opa is not None and opa.loading,
            cache=DecisionCache(settings.decision_cache_entries, settings.decision_cache_max_ttl_s),
            token=settings.token.get_secret_value() if settings.token and opa is None else None,
        )
        await engine.open()
        stack.push_async_callback(engine.close)
        return engine

    async def _stop_server(self) -> None:
        """Stop intake, let in-flight calls finish within the grace period, cancel the rest."""
        self.intake.open = False
        with contextlib.suppress(Exception):
            await self._health.enter_graceful_shutdown()
        if self._server is None:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._grace_s
        if self.scheduler is not None and self.scheduler.in_flight:
            # The server closes its connections once its calls are over, which can be before
            # their callers have read the answers: a caller writing on its connection then (a
            # flow-control update) saw UNAVAILABLE instead of its answer.
            while self.scheduler.in_flight and loop.time() < deadline:
                await asyncio.sleep(_DRAIN_POLL_S)
            await asyncio.sleep(max(0.0, min(ANSWERS_LINGER_S, deadline - loop.time())))
        await self._server.stop(max(0.0, deadline - loop.time()))
        self._server = None

    async def status(self) -> StatusSnapshot:
        """A health summary for operators."""
        engine = self._policy.engine if self._policy else None
        stats = self._sandbox.stats() if self._sandbox else None
        return StatusSnapshot(
            version=__version__,
            policy_revision=engine.revision if engine else "",
            opa_healthy=engine is not None and await engine.healthy(),
            docker_healthy=self._sandbox is not None and await self._sandbox.healthy(),
            pool_ready=stats.pooled if stats else 0,
            in_flight=self.scheduler.in_flight if self.scheduler else 0,
            sessions=len(self._store) if self._store else 0,
            instance_id=self.instance_id,
        )

    async def stop(self, grace_s: float | None = None) -> None:
        """Stop intake, let in-flight calls finish within the grace period, cancel the rest,
        then remove every container and stop OPA (everything started, in reverse order)."""
        self._grace_s = self.settings.shutdown_grace_s if grace_s is None else grace_s
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()

    async def run_until_signalled(self) -> None:
        """Serve until SIGTERM or SIGINT, then stop; tell systemd about each step."""
        notifier = Notifier.from_environment()  # before OPA starts: children must not inherit it
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        background: set[asyncio.Task[object]] = set()
        signals = 0

        def in_background(coro: Coroutine[Any, Any, object]) -> None:
            task: asyncio.Task[object] = asyncio.create_task(coro)
            background.add(task)
            task.add_done_callback(background.discard)

        def on_terminate() -> None:
            nonlocal signals
            signals += 1
            if signals == 1:
                notifier.stopping("draining calls")
                stop.set()
            elif self._server is not None:
                log.warning("second signal: cancelling the calls still running")
                in_background(self._server.stop(0))

        async def reload() -> None:
            if self.reloader is None:
                return
            notifier.reloading("reloading policies")
            result = await self.reloader.reload()
            self.metrics.policy_reloaded(result.reloaded)
            notifier.ready(f"policy {result.revision}")

        loop.add_signal_handler(signal.SIGHUP, lambda: in_background(reload()))
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, on_terminate)
        await self.start()
        heap.settle()
        notifier.ready(f"listening on {self.settings.listen}")
        watchdog = start_watchdog(notifier, lambda: True)
        await stop.wait()
        log.info("stopping")
        await self.stop()
        if watchdog is not None:  # last: systemd's watchdog stays armed while we drain
            watchdog.cancel()


@contextlib.asynccontextmanager
async def _running(sessions: SessionManager) -> AsyncIterator[SessionManager]:
    """The session manager's idle sweeper, for as long as the daemon runs."""
    sessions.start()
    try:
        yield sessions
    finally:
        await sessions.stop()


def _cleanup(sandbox: Sandbox, kept: KeptOutputs | None) -> SandboxCleanup:
    """What goes with a closed session: its containers, and its kept outputs."""

    async def cleanup(session: Session) -> int:
        if kept is not None:
            await asyncio.to_thread(kept.remove_session, session.id)
        return await sandbox.remove_session(session)

    return cleanup


def _default_workspace_for(settings: Settings) -> frozenset[str] | None:
    """Whose default session works in the configured workspace (None: everyone's): the Unix
    socket's principal and the admin principals, the operators; the tenants' work in folders of
    their own (daemon.sessions.own_defaults)."""
    if settings.workspaces.tenant_defaults == "shared":
        return None
    return frozenset({settings.auth.unix_principal, *settings.auth.admin_principals})


def _principal_uids(settings: Settings) -> PrincipalUids | None:
    """Where principals' own sandbox uids come from (None: the operator turned them off)."""
    sandbox = settings.sandbox
    if not sandbox.principal_uid_first:
        return None
    uids = UidRange(sandbox.principal_uid_first, sandbox.principal_uid_count)
    return open_ledger(settings.state_dir / LEDGER_NAME, uids, min_uid=sandbox.min_uid)
