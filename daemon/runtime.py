"""Assembles and runs the daemon: policy engine (managed or external OPA), registry, sandbox,
pipeline and the gRPC server with health and reflection; stops them in order."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import signal
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2

from daemon import __version__
from daemon.audit import AuditLog
from daemon.config import PROJECT_ROOT, Settings
from daemon.hooks.engine import HookEngine
from daemon.idempotency import ResultCache
from daemon.listen import ListenAddress
from daemon.pipeline import Pipeline, PipelineLimits, RunnerFactory
from daemon.policy.approval import ApprovalAuthority
from daemon.policy.decision_cache import DecisionCache
from daemon.policy.engine import PolicyEngine
from daemon.policy.keys import load_key
from daemon.policy.opa_engine import OpaPolicyEngine
from daemon.policy.opa_server import ManagedOpa, find_opa
from daemon.policy.reloader import PolicyReloader
from daemon.policy.revision import policy_revision
from daemon.policy.shadow import ShadowedEngine
from daemon.sandbox_bridge import SessionSandboxRunner
from daemon.sandbox_setup import (
    remove_session_containers,
    start_sandbox_executor,
    stop_sandbox_executor,
)
from daemon.scheduler import Scheduler, SchedulerLimits
from daemon.server.admin import AdminService, StatusSnapshot
from daemon.server.app import SERVICE_NAMES, build_server
from daemon.server.identity import CallerResolver
from daemon.server.service import ExecutorService, Intake
from daemon.service.metrics import Metrics, MetricsServer
from daemon.service.notify import Notifier, start_watchdog
from daemon.session import Session
from daemon.session_manager import SessionManager
from daemon.sessions import SessionStore
from daemon.tools.builtin import builtin_registry
from daemon.tools.contract import SandboxRunner
from sandbox.executor import SandboxExecutor

log = logging.getLogger(__name__)


def instance_id_for(settings: Settings) -> str:
    """Stable per listener, so a restarted daemon finds its predecessor's leftovers."""
    if settings.instance_id:
        return settings.instance_id
    return "tj-" + hashlib.sha256(settings.listen.encode()).hexdigest()[:12]


class Daemon:
    """One running tooljail daemon."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.instance_id = instance_id_for(settings)
        self.address = ListenAddress.parse(settings.listen)
        self.opa: ManagedOpa | None = None
        self.engine: OpaPolicyEngine | None = None
        self.sandbox_executor: SandboxExecutor | None = None
        self.scheduler: Scheduler | None = None
        self.sessions: SessionManager | None = None
        self.reloader: PolicyReloader | None = None
        self.shadow_opa: ManagedOpa | None = None
        self.shadow_engine: OpaPolicyEngine | None = None
        self.shadowed: ShadowedEngine | None = None
        self._server: grpc.aio.Server | None = None
        self._health = health.aio.HealthServicer()
        self._audit: AuditLog | None = None
        self._session_store: SessionStore | None = None
        self.intake = Intake()
        self.metrics = Metrics()
        self._metrics_server: MetricsServer | None = None

    async def start(self) -> None:
        """Start everything; on failure, stop what was started and raise."""
        try:
            await self._start()
        except BaseException:
            await self.stop()
            raise

    async def _start(self) -> None:
        settings = self.settings
        self.address.prepare()
        self._audit = AuditLog(settings.audit_log)
        policies_dir = settings.opa.policies_dir
        binary = None
        if settings.opa.url:
            url = settings.opa.url
        else:
            binary = find_opa(settings.opa.binary, PROJECT_ROOT)
            self.opa = ManagedOpa(binary, policies_dir)
            await self.opa.start()
            url = self.opa.url
        self.engine = OpaPolicyEngine(
            url,
            settings.opa.timeout_s,
            settings.sandbox.defaults,
            policy_revision(policies_dir),
            on_error=self.metrics.opa_error,
            loading=lambda: self.opa is not None and self.opa.loading,
            cache=self._decision_cache(),
        )
        await self.engine.open()
        self.reloader = PolicyReloader(self.opa, self.engine, binary, policies_dir)
        policy: PolicyEngine = self.engine
        if settings.opa.shadow_policies_dir is not None and binary is not None:
            policy = await self._start_shadow(binary, settings.opa.shadow_policies_dir)
        sessions = SessionStore(
            settings.workspace, settings.sessions_root or settings.state_dir / "sessions"
        )
        approval = settings.approval
        key = load_key(
            approval.key.get_secret_value() if approval.key else None,
            approval.key_file or settings.state_dir / "approval.key",
        )
        pipeline = Pipeline(
            registry=builtin_registry(settings.deferred_tools),
            policy=policy,
            sessions=sessions,
            limits=PipelineLimits(
                result_budget_chars=settings.result_budget_chars,
                default_sandbox=settings.sandbox.defaults,
                ceilings=settings.sandbox.ceilings,
            ),
            audit=self._audit,
            runner_factory=await self._start_sandbox(),
            approvals=ApprovalAuthority(key, ttl_s=approval.ttl_s),
            metrics=self.metrics,
            hooks=HookEngine(settings.hooks) if settings.hooks else None,
        )
        sched = settings.scheduler
        scheduler = Scheduler(
            pipeline,
            SchedulerLimits(
                max_parallel=sched.max_parallel,
                max_in_flight=sched.max_in_flight,
                max_in_flight_per_session=sched.max_in_flight_per_session,
                queue_timeout_s=sched.queue_timeout_s,
            ),
            ResultCache(ttl_s=sched.replay_ttl_s, max_entries=sched.replay_max_entries),
        )
        self.scheduler = scheduler
        self.sessions = SessionManager(
            sessions,
            self.engine,
            scheduler,
            default_idle_ttl_s=settings.session_idle_ttl_s,
            sandbox_cleanup=self._session_sandbox_cleanup,
        )
        self.sessions.start()
        self._session_store = sessions
        resolver = CallerResolver(settings.auth)
        server = build_server(
            settings,
            self.address,
            ExecutorService(
                pipeline, scheduler, self.sessions, resolver, self.intake, self.metrics
            ),
            AdminService(
                self.reloader,
                resolver,
                settings.auth.admin_principals,
                self.status,
                self.sessions,
            ),
            self._health,
        )
        if settings.metrics.enabled:
            host, _, port = settings.metrics.listen.rpartition(":")
            self._metrics_server = self.metrics.start_http_server(host, int(port))
        self.metrics.watch_sandbox(
            lambda: self.sandbox_executor.stats() if self.sandbox_executor else None,
            asyncio.get_running_loop(),
        )
        await server.start()
        self._server = server
        self.address.secure(settings.socket_mode, settings.socket_group)
        for name in ("", *SERVICE_NAMES):
            await self._health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info("tooljail listening on %s (instance %s)", settings.listen, self.instance_id)

    def _decision_cache(self) -> DecisionCache:
        opa = self.settings.opa
        return DecisionCache(opa.decision_cache_entries, opa.decision_cache_max_ttl_s)

    async def _start_shadow(self, binary: Path, folder: Path) -> PolicyEngine:
        """A second managed OPA with the candidate policy, compared on every decision."""
        assert self.engine is not None
        self.shadow_opa = ManagedOpa(binary, folder)
        await self.shadow_opa.start()
        self.shadow_engine = OpaPolicyEngine(
            self.shadow_opa.url,
            self.settings.opa.timeout_s,
            self.settings.sandbox.defaults,
            policy_revision(folder),
            loading=lambda: self.shadow_opa is not None and self.shadow_opa.loading,
            cache=self._decision_cache(),
        )
        await self.shadow_engine.open()
        self.shadowed = ShadowedEngine(self.engine, self.shadow_engine)
        log.info("shadow mode: comparing with the policy in %s", folder)
        return self.shadowed

    async def _start_sandbox(self) -> RunnerFactory:
        """Start the Docker sandbox if enabled and reachable; without it sandboxed tools refuse."""
        if not self.settings.sandbox.enabled:
            return lambda _session, _tool_use_id: None
        executor = await start_sandbox_executor(
            self.settings, self.instance_id, self.settings.workspace.resolve()
        )
        if executor is None:
            return lambda _session, _tool_use_id: None
        self.sandbox_executor = executor

        def factory(session: Session, tool_use_id: str) -> SandboxRunner:
            return SessionSandboxRunner(executor, session, tool_use_id)

        return factory

    async def _session_sandbox_cleanup(self, session: Session) -> int:
        """Remove a closed session's containers (its running ones were killed on cancel)."""
        if self.sandbox_executor is None:
            return 0
        return await remove_session_containers(self.sandbox_executor, session)

    async def status(self) -> StatusSnapshot:
        """A health summary for operators."""
        opa_healthy = self.engine is not None and await self.engine.healthy()
        executor = self.sandbox_executor
        docker_healthy = executor is not None and await executor.healthy()
        return StatusSnapshot(
            version=__version__,
            policy_revision=self.engine.revision if self.engine else "",
            opa_healthy=opa_healthy,
            docker_healthy=docker_healthy,
            pool_ready=executor.stats().pooled if executor else 0,
            in_flight=self.scheduler.in_flight if self.scheduler else 0,
            sessions=len(self._session_store) if self._session_store else 0,
            instance_id=self.instance_id,
        )

    async def stop(self, grace_s: float | None = None) -> None:
        """Stop intake, let in-flight calls finish within the grace period, cancel the rest,
        then remove every container and stop OPA."""
        grace = self.settings.shutdown_grace_s if grace_s is None else grace_s
        self.intake.open = False
        with contextlib.suppress(Exception):
            await self._health.enter_graceful_shutdown()
        if self._server is not None:
            await self._server.stop(grace)
            self._server = None
        if self.sessions is not None:
            await self.sessions.stop()
            self.sessions = None
        if self.sandbox_executor is not None:
            await stop_sandbox_executor(self.sandbox_executor)
            self.sandbox_executor = None
        if self.shadowed is not None:
            await self.shadowed.drain()
        if self.shadow_engine is not None:
            await self.shadow_engine.close()
            self.shadow_engine = None
        if self.shadow_opa is not None:
            await self.shadow_opa.stop()
            self.shadow_opa = None
        if self.engine is not None:
            await self.engine.close()
            self.engine = None
        if self.opa is not None:
            await self.opa.stop()
            self.opa = None
        if self._metrics_server is not None:
            self._metrics_server.close()
            self._metrics_server = None
        if self._audit is not None:
            self._audit.close()
            self._audit = None
        self.address.cleanup()

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
        notifier.ready(f"listening on {self.settings.listen}")
        watchdog = start_watchdog(notifier, lambda: True)
        await stop.wait()
        log.info("stopping")
        await self.stop()
        if watchdog is not None:  # last: systemd's watchdog stays armed while we drain
            watchdog.cancel()
