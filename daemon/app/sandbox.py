"""The one hop from a tool to the sandbox: starts the Docker executor (reaping a predecessor's
leftovers and warming the default workspace's pool), hands each sandboxed call a runner bound to
its session and tool_use id, keeps MCP servers and background commands for sessions, removes a
closed session's containers and stops it all."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from daemon.app.egress import Egress
from daemon.calls.audit import AuditLog
from daemon.config import Settings
from daemon.egress.proxy import CallEgress, EgressCall, EgressProxy
from daemon.errors import ToolError
from daemon.host.git_pins import RepositoryLook, repository_look
from daemon.host.pinned import PinnedDirectory
from daemon.host.proc_visibility import warn_when_commands_show
from daemon.host.threads import TenantThreads
from daemon.sessions.session import Session
from daemon.sessions.workspaces import HostLook
from daemon.tools.background import BackgroundShells
from daemon.tools.contract import SandboxRunner
from sandbox import after_answer
from sandbox.backend import (
    GitAccess,
    McpSessionCall,
    McpSessionRequest,
    SandboxError,
    SandboxLimits,
    SandboxRequest,
    SandboxResult,
    SandboxSpec,
)
from sandbox.docker_backend import DockerBackend
from sandbox.engine_client import engine_listening
from sandbox.executor import ExecutorStats, SandboxExecutor
from sandbox.image import default_image_ref
from sandbox.kept import KeptServers
from sandbox.limits import clamp_limits
from sandbox.memory import MemoryBudget, default_budget_mb, host_memory_mb
from sandbox.runner import RUNNER_DIR
from sandbox.runner_stage import stage_runner

log = logging.getLogger(__name__)

#: Where in the state directory the runner is staged for containers (sandbox/runner_stage.py).
RUNNER_FOLDER = "runner"
#: Where in it the sources of containers' mounts are bound for the engine (sandbox/source_stage.py).
SOURCE_STAGE_FOLDER = "stage"


class _SessionRunner(SandboxRunner):
    """Runs one call's requests in fresh containers over its session's workspace."""

    def __init__(
        self,
        executor: SandboxExecutor,
        kept: KeptServers,
        session: Session,
        tool_use_id: str,
        egress: CallEgress | None,
        audit: AuditLog | None = None,
    ) -> None:
        self._executor = executor
        self._kept = kept
        self._session = session
        self._tool_use_id = tool_use_id
        self._egress = egress
        self._audit = audit

    def notes(self) -> list[str]:
        note = self._egress.note() if self._egress is not None else ""
        return [note] if note else []

    async def run(
        self,
        request: SandboxRequest,
        limits: SandboxLimits,
        on_output: Callable[[str], None] | None = None,
        *,
        image: str = "",
        read_only_workspace: bool = False,
        on_start: Callable[[], None] | None = None,
    ) -> SandboxResult:
        spec, before = await _spec_and_look(self._session, limits)
        spec = spec.model_copy(update={"image": image, "read_only_workspace": read_only_workspace})
        held = self._held_root(spec)
        try:
            return await self._executor.run(
                spec,
                request,
                tool_use_id=self._tool_use_id,
                on_output=on_output,
                egress=self._egress,
                on_start=on_start,
            )
        finally:
            self._check_repository(spec, before, held)

    async def converse(
        self,
        server: str,
        opening: McpSessionRequest,
        call: McpSessionCall,
        limits: SandboxLimits,
        on_output: Callable[[str], None] | None = None,
        *,
        image: str = "",
    ) -> SandboxResult:
        spec, before = await _spec_and_look(self._session, limits)
        spec = spec.model_copy(update={"image": image})
        held = self._held_root(spec)
        try:
            return await self._kept.call(
                spec,
                server,
                opening,
                call,
                tool_use_id=self._tool_use_id,
                egress=self._egress,
                on_output=on_output,
                owner=self._session.owner,
            )
        finally:
            self._check_repository(spec, before, held)

    def _held_root(self, spec: SandboxSpec) -> PinnedDirectory | None:
        """The workspace, held for the repository check after the call (None: no check): the
        session may be closed by then (attacker round 92: a background command's `git init`,
        then CloseSession, and the check found the workspace released and wrote nothing)."""
        if spec.limits.git is not GitAccess.READ_ONLY:
            return None
        try:
            return self._session.pinned_root().duplicate()
        except OSError as exc:  # out of descriptors
            raise ToolError(
                f"The workspace could not be held for the check of its repository after the call "
                f"({exc.strerror}), so nothing ran. Try again."
            ) from exc

    def _check_repository(
        self, spec: SandboxSpec, before: RepositoryLook, held: PinnedDirectory | None
    ) -> None:
        """After a container ran over a read-only repository, look again (in the background,
        off the event loop): what changed on the host meanwhile was not held for that container
        (a re-created `.git` detached its read-only mount; a submodule added or checked out was
        never pinned), so the command may have written it. Nothing can undo that; the owner is
        told, in the audit. A workspace without a repository is looked at too: one the command
        made there is the model's, its hooks and configuration run by git on the host (attacker
        round 91: `git init` and code writing .git/config in one call). A repository made and
        removed again while the command ran leaves nothing to compare (policies/README.md). The
        look starts once the call's answer is sent (sandbox/after_answer.py)."""
        if held is None:
            return

        def start() -> None:
            check = asyncio.get_running_loop().create_task(
                self._audit_if_changed(spec, before, held)
            )
            _checks.add(check)
            check.add_done_callback(_checks.discard)
            check.add_done_callback(lambda _: held.close())

        after_answer.later(start)

    async def _audit_if_changed(
        self, spec: SandboxSpec, before: RepositoryLook, root: PinnedDirectory
    ) -> None:
        try:
            if await _look_of(root, self._session) == before:
                return
        except ToolError:
            pass  # unreadable now: changed as well
        except Exception:  # a look that failed otherwise: the owner is told all the same
            log.exception("looking at the repository of workspace %s failed", spec.workspace)
        made = not before.pins and not before.models
        log.warning(
            "the repository of workspace %s %s while call %s ran in a container; check its "
            "hooks and configuration before running git there",
            spec.workspace,
            "was made" if made else "changed",
            self._tool_use_id,
        )
        if self._audit is not None:
            self._audit.write(
                {
                    "event": "repository_created" if made else "repository_changed",
                    "time": time.time(),
                    "session": self._session.id,
                    "principal": self._session.owner,
                    "tool_use_id": self._tool_use_id,
                    "workspace": str(spec.workspace),
                    "note": CREATED_NOTE if made else CHANGED_NOTE,
                }
            )


_checks: set[asyncio.Task[None]] = set()
"""Repository checks under way (held so that they are not collected before they end)."""

CHANGED_NOTE = (
    "The workspace's repository changed on the host while a sandboxed command ran (made again, or "
    "a submodule added or checked out), and what changed was not held read-only for that command: "
    "it may have written it. Look "
    "at .git/hooks and .git/config (and the submodules') before running git there."
)


CREATED_NOTE = (
    "A repository appeared in the workspace, which had none, while this sandboxed command ran: "
    "this command made it, or another one working in the same workspace at the time (another "
    "call, a background command, the host). Its hooks and configuration may be the model's, and "
    "git on the host runs them. Look at .git/hooks and .git/config (or the workspace's own "
    "HEAD, config and hooks/) before running git there. One the sandboxes made is the model's "
    "for good: later calls may change it (a further record says so where it can be seen, not "
    "everywhere). git run by another account refuses a .git a sandbox's uid owns unless told "
    "to trust it (do not), but takes a root laid out as a repository when it owns the root."
)


REPOSITORY_LOOK_THREADS = 16
"""Repository looks at once, all principals together."""
_REPOSITORY_LOOKS = TenantThreads(1, REPOSITORY_LOOK_THREADS, "git-pins")
"""Where repositories are looked at: threads of their own, one per principal at a time. However
many sessions a principal has whose indexes keep changing (each change parsed again), it holds
one of them (attacker round 67: eight sessions re-parsing large indexes queued every other
tenant's calls behind them), and a look stuck on a hung mount holds only its principal's turn
(a turn ends when its look does, not when its call is cancelled: round 68)."""


async def _look_of(root: PinnedDirectory, session: Session) -> RepositoryLook:
    """`repository_look`, in one of the session owner's repository-look threads."""
    return await _REPOSITORY_LOOKS.run(
        session.owner, functools.partial(repository_look, root, session.made_by_sandboxes)
    )


async def _spec(session: Session, limits: SandboxLimits, *, bound: bool = True) -> SandboxSpec:
    """`_spec_and_look`'s container spec."""
    spec, _ = await _spec_and_look(session, limits, bound=bound)
    return spec


async def _spec_and_look(
    session: Session, limits: SandboxLimits, *, bound: bool = True
) -> tuple[SandboxSpec, RepositoryLook]:
    """A container for the session's pinned workspace and identity (`bound`: labelled with it),
    and the look at its repository (compared with another after the call). The repository and
    who on the host could change the workspace's path are looked at in a worker thread: a
    large index is read once per change, and the other calls go on meanwhile.

    Raises:
        ToolError: The workspace's repository is to be read-only and cannot be (`git_pins`),
            or could be swapped while its container is made by another account than the
            commands' (`_no_root`).
    """
    root = session.pinned_root()
    read_only = limits.git is GitAccess.READ_ONLY
    look, (changers, way) = await _REPOSITORY_LOOKS.run(
        session.owner, functools.partial(_look_at_workspace, session, root, read_only=read_only)
    )
    spec = SandboxSpec(
        workspace=root.path,
        workspace_id=root.identity,
        run_as=session.sandbox_as,
        group_shared=session.group_shared,
        no_root=_no_root(session, changers, pinned=bool(look.pins)),
        limits=limits,
        session_id=session.id if bound else "",
        pool_owner=session.owner,
        git_pins=look.pins,
        host_way=way,
    )
    return spec, look


def _look_at_workspace(
    session: Session, root: PinnedDirectory, *, read_only: bool
) -> tuple[RepositoryLook, HostLook]:
    """The repository (when it is to be read-only) and who on the host could change the
    workspace's path or its pins': one hop to a worker thread for both."""
    look = repository_look(root, session.made_by_sandboxes) if read_only else RepositoryLook((), ())
    return look, session.host_changers([pin.path for pin in look.pins])


def _no_root(session: Session, changers: frozenset[int] | None, *, pinned: bool) -> bool:
    """Whether the container must have no root: an account of the host can change the
    workspace's path (SandboxSpec.no_root). With the repository held read-only, such an
    account can steer the engine's mounts over what the container's first process runs, so
    it must be the commands' own identity: its code then runs as itself (attacker round 126:
    a folder of the sandbox account's inside a user's project gave that user the sandbox
    account's uid, and from there a root runner over the default workspace)."""
    if not pinned:
        return changers != frozenset()
    run_as = session.sandbox_as[0] if session.sandbox_as else None
    if changers is not None and changers <= {run_as}:
        return bool(changers)
    who = "anyone" if changers is None else "uid " + ", ".join(map(str, sorted(changers)))
    raise ToolError(
        f"The workspace {session.workspace} lies where {who} other than its sandboxes' own "
        "identity can rename it or a folder above it, so a container holding its repository "
        "read-only cannot be made safely there: nothing ran. Open the session over a folder "
        "only root and its owner can change (a group- or world-writable folder on the way "
        "counts), or ask the operator to let this principal write git (sandbox.git)."
    )


ENGINE_RETRY_S = 5.0
"""How often a daemon started without a Docker engine looks for one again."""


@dataclass(frozen=True)
class _Parts:
    """What connecting to the engine needs, kept for when it appears after the start."""

    settings: Settings
    instance_id: str
    egress: Egress | None
    audit: AuditLog | None


class Sandbox:
    """The daemon's sandbox, or its absence (disabled, or no Docker engine yet)."""

    def __init__(
        self,
        executor: SandboxExecutor | None,
        warm_limits: SandboxLimits | None = None,
        egress: EgressProxy | None = None,
        kept: KeptServers | None = None,
        shells: BackgroundShells | None = None,
    ) -> None:
        self._executor = executor
        self._kept = kept
        self.shells = shells
        """The background commands of every session (None without a sandbox)."""
        self._warm_limits = warm_limits
        self._egress = egress
        self._warming: asyncio.Task[None] | None = None
        self._settings: _Parts | None = None
        self._waiting: asyncio.Task[None] | None = None

    @classmethod
    async def start(
        cls,
        settings: Settings,
        instance_id: str,
        egress: Egress | None = None,
        audit: AuditLog | None = None,
    ) -> Sandbox:
        """The sandbox of these settings; without an engine (logged) sandboxed tools refuse and
        are not listed, and the engine is looked for again every ENGINE_RETRY_S until it
        answers. `warm` then pre-starts containers for a session."""
        sandbox = cls(None)
        if not settings.sandbox.enabled:
            return sandbox
        warn_when_commands_show()
        sandbox._settings = _Parts(settings, instance_id, egress, audit)
        if not await sandbox._connect(quiet=False):
            sandbox._waiting = asyncio.create_task(sandbox._connect_later(), name="docker-wait")
        return sandbox

    async def _connect(self, *, quiet: bool) -> bool:
        """Connect to the engine and build the executor; whether it worked."""
        parts = self._settings
        assert parts is not None
        settings, egress = parts.settings, parts.egress
        image = settings.sandbox.image or default_image_ref()
        if not engine_listening():  # nothing answers yet: no client to build (and leak)
            if not quiet:
                log.error(
                    "no Docker engine answers (DOCKER_HOST, or /var/run/docker.sock); sandboxed "
                    "tools are not offered and refuse to run until one does (looked for again "
                    "every %.0f s)",
                    ENGINE_RETRY_S,
                )
            return False
        memory = _memory_budget(settings)
        if memory is None:
            if not quiet:
                log.error(
                    "cannot read the host's memory (/proc/meminfo) for the sandboxes' memory "
                    "budget; set sandbox.memory_budget_mb. Sandboxed tools are not offered"
                )
            return False
        runner = await asyncio.to_thread(_runner_folder, settings.state_dir / RUNNER_FOLDER)
        try:
            backend = DockerBackend(
                image=image,
                instance_id=parts.instance_id,
                runner_source=runner,
                egress_root=egress.root if egress else None,
                ca_bundle=egress.ca_bundle if egress else None,
                stage_root=settings.state_dir.absolute() / SOURCE_STAGE_FOLDER,
            )
        except Exception as exc:  # noqa: BLE001 - docker.errors.DockerException and OS errors alike
            if not quiet:
                log.error(
                    "Docker is not available (%s); sandboxed tools are not offered and refuse to "
                    "run until it is (looked for again every %.0f s)",
                    exc,
                    ENGINE_RETRY_S,
                )
            return False
        try:
            reaped = await backend.reap()
        except Exception as exc:  # noqa: BLE001 - the engine may be down; calls will say so
            log.error("Docker does not answer (%s); sandboxed calls fail until it does", exc)
        else:
            if reaped:
                log.warning("removed %d leftover containers of a previous daemon", reaped)
        executor = SandboxExecutor(
            backend,
            pool_size=settings.sandbox.pool_size,
            idle_ttl_s=settings.sandbox.idle_ttl_s,
            max_pooled=settings.sandbox.pool_max,
            max_pooled_per_owner=settings.sandbox.pool_per_principal,
            memory=memory,
        )
        self._warm_limits = clamp_limits(settings.sandbox.defaults, settings.sandbox.ceilings)
        self._kept = KeptServers(
            executor,
            max_kept=settings.sandbox.kept_servers_max,
            idle_s=settings.sandbox.kept_servers_idle_s,
            per_owner=settings.sandbox.kept_servers_per_principal,
        )
        audit = parts.audit
        self.shells = BackgroundShells(
            max_total=settings.sandbox.background_max,
            per_principal=settings.sandbox.background_per_principal,
            max_timeout_ms=int(settings.sandbox.background_max_s * 1000),
            on_end=(lambda record: audit.write({"event": "background_ended", **record}))
            if audit is not None
            else None,
        )
        self._egress = egress.proxy if egress else None
        self._executor = executor  # last: from here on, sandboxed tools are offered
        return True

    async def _connect_later(self) -> None:
        while self._executor is None:
            await asyncio.sleep(ENGINE_RETRY_S)
            if await self._connect(quiet=True):
                log.warning("the Docker engine answers now; sandboxed tools are available again")

    def warm(self, session: Session) -> None:
        """Pre-start the session's containers in the background (the first call then does not
        pay a cold start)."""
        if self._executor is None or self._warm_limits is None:
            return
        self._warming = asyncio.create_task(
            self._warm(session, self._warm_limits), name="sandbox-warm"
        )

    async def _warm(self, session: Session, limits: SandboxLimits) -> None:
        assert self._executor is not None
        try:
            spec = await _spec(session, limits, bound=False)
        except ToolError as exc:
            log.warning("not pre-starting containers for session %s: %s", session.id, exc)
            return
        except Exception:  # a background warm-up never fails the daemon's stop
            log.exception("not pre-starting containers for session %s", session.id)
            return
        try:
            await self._executor.warm(spec)
        except SandboxError as exc:
            log.error("could not pre-start sandbox containers: %s", exc)

    @property
    def available(self) -> bool:
        """Whether sandboxed calls can run (disabled, or no engine at start: not)."""
        return self._executor is not None

    def runner(
        self, session: Session, tool_use_id: str, egress: EgressCall | None = None
    ) -> SandboxRunner | None:
        """The runner of one sandboxed call (None: no sandbox, the tool says so); `egress` is
        how its connections are decided and audited, should the policy grant the network."""
        if self._executor is None or self._kept is None:
            return None
        call_egress = None
        if self._egress is not None and egress is not None:
            call_egress = self._egress.for_call(egress)
        return _SessionRunner(
            self._executor,
            self._kept,
            session,
            tool_use_id,
            call_egress,
            self._settings.audit if self._settings is not None else None,
        )

    def stats(self) -> ExecutorStats | None:
        """The executor's counters (None without a sandbox)."""
        return self._executor.stats() if self._executor is not None else None

    async def healthy(self) -> bool:
        """Whether the engine answers."""
        return self._executor is not None and await self._executor.healthy()

    async def remove_session(self, session: Session) -> int:
        """Destroy the warm containers and the MCP servers kept for a closed session; returns
        how many."""
        if self._executor is None:
            return 0
        removed = await self._kept.remove_session(session.id) if self._kept is not None else 0
        if self.shells is not None:
            removed += await self.shells.remove_session(session.id)
        removed += await self._executor.discard_workspace(str(session.workspace))
        return removed

    async def stop(self) -> None:
        """Destroy every container the executor holds or runs."""
        if self._waiting is not None:
            self._waiting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._waiting
        if self._warming is not None:
            self._warming.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._warming
        if self.shells is not None:
            await self.shells.close()
        if self._kept is not None:
            await self._kept.close()
        if self._executor is not None:
            await self._executor.close()
            self._executor = None


def _memory_budget(settings: Settings) -> MemoryBudget | None:
    """The sandboxes' memory budget of these settings (None: the host's memory is unknown)."""
    sandbox = settings.sandbox
    total = sandbox.memory_budget_mb
    if total is None:
        host = host_memory_mb()
        if not host:
            return None
        total = default_budget_mb(host)
    log.info(
        "sandbox memory budget: %d MB, %d MB per principal",
        total,
        int(total * sandbox.memory_per_principal),
    )
    return MemoryBudget(
        total, owner_share=sandbox.memory_per_principal, wait_s=sandbox.memory_wait_s
    )


def _runner_folder(parent: Path) -> Path:
    """The runner staged with its compiled forms under `parent`; the package's own folder when
    it cannot be (each container then compiles the runner's modules at its start)."""
    try:
        return stage_runner(parent)
    except OSError as exc:
        log.warning(
            "cannot stage the sandbox runner in %s (%s); containers compile it at each start",
            parent,
            exc,
        )
        return RUNNER_DIR
