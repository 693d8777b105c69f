"""The Docker backend: one hardened container per request, driven through the attach socket.

Start = create + attach + start (one worker-thread hop, blocking docker SDK calls); the container
runs `sandbox/runner/runner.py`, which waits for one request on stdin. `run` writes the request to
the attach socket and reads the runner's answer from it on the event loop (non-blocking socket, no
thread), returning as soon as the answer is complete. Every container the backend creates is
tracked from the moment the engine names it until it is removed, and labelled so it can be reaped
even when the daemon that made it is gone.

Only Docker engines reached over a Unix or plain TCP socket are supported (the default
`/var/run/docker.sock` is the case that matters): the attach stream is read as a raw socket.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import math
import secrets
import shutil
import socket
import ssl
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import docker
import docker.errors
import requests

from sandbox import reaper, timeline
from sandbox.backend import (
    SET_UP_CHANGED,
    BashRequest,
    ExecRequest,
    McpRequest,
    McpSessionCall,
    McpSessionRequest,
    NetworkMode,
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
from sandbox.engine_client import engine_client
from sandbox.hardening import (
    EGRESS_SOCKET_NAME,
    TMP_DIR,
    EgressMounts,
    container_recipe,
    egress_targets,
)
from sandbox.hardening import RUNNER_DIR as RUNNER_TARGET
from sandbox.mount_check import misplaced, read_mount_points, submounts_below
from sandbox.pin_check import moved_pin
from sandbox.protocol import (
    ATTACHED_BYTES,
    PROTOCOL_VERSION,
    STDERR,
    STDOUT,
    AttachDemuxer,
    FrameDecoder,
    ProtocolError,
    encode_frame,
    progress_output,
)
from sandbox.runner import RUNNER_DIR
from sandbox.set_up_gate import FreezeOutcome, SetUpGate, Unfreezable
from sandbox.socket_memory import bound_socket_memory
from sandbox.source_stage import SourceStage, engine_pid

log = logging.getLogger(__name__)

_T = TypeVar("_T")
REMOVAL_PATIENCE_S = 300.0
_STOPPED_KEPT = 1024
STOPPED_FOR_SET_UP = (
    "the sandbox was stopped: its processes could not be paused while another container of its "
    "workspace was set up (they stayed in long system calls, such as several large writes at "
    "once); the request may have been partly carried out, check its effects, then retry, or "
    "write in smaller pieces"
)
"""What a call is told whose container `SetUpGate` stopped."""
FREEZE_ATTEMPTS = 5
"""Pauses asked of a container the runtime refuses to pause while the engine says it runs (10 to
160 ms apart: an exit the engine has not taken in yet)."""
"""How long a removal the engine refused is tried again while its container still runs."""
_ENGINE_ERRORS = (docker.errors.DockerException, requests.RequestException, OSError)
_RESULT_FIELDS = frozenset(SandboxResult.model_fields) - {"sandbox_id", "duration_ms"}
_STDERR_KEPT = 4096
_RECV_BYTES = 1 << 16
#: What an egress container's folder name looks like (random hex of this length): callers size
#: socket paths with it.
CONTAINER_FOLDER_SAMPLE = "0" * 24


class _AttachConnection:
    """The hijacked HTTP connection of `POST /containers/{id}/attach`: stdin in, frames out."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw  # keeps the SDK's response (and with it the connection) alive
        inner = raw if isinstance(raw, socket.socket) else getattr(raw, "_sock", None)
        if not isinstance(inner, socket.socket) or isinstance(inner, ssl.SSLSocket):
            raise SandboxStartError(
                "the Docker engine is reached through a transport this backend cannot read "
                "(TLS or SSH); point DOCKER_HOST at a Unix socket"
            )
        self.sock = inner
        self.sock.setblocking(False)
        self._closed = False

    def peer_closed(self) -> bool:
        """True when the container's side has already hung up (it died while pooled)."""
        try:
            return self.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        response = getattr(self._raw, "_response", None)
        closers = [self._raw.close, self.sock.close]
        if response is not None:
            closers.insert(0, response.close)
        for closer in closers:
            # Already closed underneath (the response owns the socket too): nothing to release.
            with contextlib.suppress(OSError, ValueError):
                closer()


def _release_response(exc: BaseException) -> None:
    """Close the HTTP response an engine error carries. An attach refused with an error status
    (the engine stopping, the container gone) leaves its streamed response open, holding the
    connection's socket until garbage collection."""
    response = getattr(exc, "response", None)
    if isinstance(response, requests.Response):
        response.close()


def _socket_path(api: docker.APIClient) -> str:
    """The engine's Unix socket, as the SDK connects to it ("" over TCP, TLS or SSH)."""
    return str(getattr(getattr(api, "_custom_adapter", None), "socket_path", "") or "")


class DockerBackend(SandboxBackend):
    """Starts hardened sandbox containers on the local Docker engine.

    Args:
        image: Image reference of the sandbox image (bash, coreutils, python3).
        instance_id: Identifies this daemon instance in the labels; `reap` and the periodic reaper
            only ever touch containers carrying it.
        client: A docker SDK client; by default one from the environment, negotiating the API
            version (one blocking call, here in the constructor).
        runner_source: Host folder of the runner mounted into containers.
        max_workers: Threads running blocking SDK calls (create/start/remove/list).
        grace_s: Added to a Bash request's own timeout for the outer deadline: the runner kills the
            command itself at the timeout; the daemon kills the container when even that fails.
        write_timeout_s: Outer deadline of a write request.
        runner_idle_exit_s: A never-used container exits on its own after this long.
        untracked_min_age_s: `reap_untracked` spares younger containers, which may be starting.
        egress_root: Private host folder (the daemon's alone) under which each egress container
            gets a folder for its proxy socket; None: egress containers cannot start.
        ca_bundle: Host file (system roots and tooljail's CA) egress containers trust.
    """

    def __init__(
        self,
        *,
        image: str,
        instance_id: str,
        client: docker.DockerClient | None = None,
        runner_source: Path = RUNNER_DIR,
        max_workers: int = 8,
        grace_s: float = 2.0,
        write_timeout_s: float = 60.0,
        runner_idle_exit_s: int = 900,
        untracked_min_age_s: float = 30.0,
        egress_root: Path | None = None,
        ca_bundle: Path | None = None,
        stage_root: Path | None = None,
    ) -> None:
        if not instance_id:
            raise ValueError("instance_id must be non-empty: it is how leftovers are found")
        self.image = image
        self.instance_id = instance_id
        self._owns_client = client is None
        # Connections for both pools of threads below.
        self._client = client or engine_client(max_pool_size=2 * max_workers)
        self.api: docker.APIClient = self._client.api
        self._runner_source = runner_source
        self.grace_s = grace_s
        self.write_timeout_s = write_timeout_s
        self._idle_exit_s = runner_idle_exit_s
        self._untracked_min_age_s = untracked_min_age_s
        self._egress_root = egress_root
        self._ca_bundle = ca_bundle
        self._egress_folders: dict[str, Path] = {}
        self._threads = concurrent.futures.ThreadPoolExecutor(
            max_workers=max_workers, thread_name_prefix="tooljail-docker"
        )
        # Removals have threads of their own: one of a container whose processes are stuck in
        # the kernel holds its thread until the engine gives up, and enough of them at once
        # must not keep every tenant's next container from starting (attacker round 98's lead).
        self._removals = concurrent.futures.ThreadPoolExecutor(
            max_workers=max_workers, thread_name_prefix="tooljail-docker-remove"
        )
        self._live: set[str] = set()
        self._live_lock = threading.Lock()
        self._starting: set[asyncio.Future[tuple[str, _AttachConnection]]] = set()
        self._cleanups: set[asyncio.Task[bool]] = set()
        self._unbounded = False
        """Whether containers' socket memory could not be bounded (said once in the log)."""
        self._mounts_unchecked = False
        """Whether containers' mount tables could not be read (said once in the log)."""
        self._mounts_seen = False
        """Whether one was read: then every started container's can be."""
        self.gate = SetUpGate(self)
        self._stage = (
            SourceStage.open(stage_root, engine_pid(_socket_path(self.api)))
            if stage_root is not None
            else None
        )
        """Where mount sources are bound by descriptor for the engine (None: given by path)."""
        self._stopped_for_set_up: dict[str, None] = {}
        """Containers `stop` ended, the latest last."""
        """Pinned containers' set-ups, and the containers that may change their workspaces."""
        self._closed = False

    # --- blocking helpers, run in worker threads ------------------------------------------------

    async def _call(self, fn: Callable[..., _T], *args: Any) -> _T:
        return await asyncio.get_running_loop().run_in_executor(self._threads, fn, *args)

    async def _removing(self, fn: Callable[..., _T], *args: Any) -> _T:
        """`fn` in a removal thread (see `_removals`)."""
        return await asyncio.get_running_loop().run_in_executor(self._removals, fn, *args)

    def _track(self, container_id: str) -> None:
        with self._live_lock:
            self._live.add(container_id)

    def _untrack(self, container_id: str) -> None:
        with self._live_lock:
            self._live.discard(container_id)

    def _remove_sync(self, container_id: str) -> bool:
        gone = reaper.remove_container(self.api, container_id, going_counts=False)
        # Untracked even when removal failed: the periodic sweep of untracked leftovers retries.
        self._untrack(container_id)
        with self._live_lock:
            folder = self._egress_folders.pop(container_id, None)
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
        return gone

    def _egress_mounts(self, spec: SandboxSpec) -> EgressMounts | None:
        """A fresh folder for the container's proxy socket (egress network only). Entered by the
        container's root, which has no capability to override modes, whatever the daemon's
        user: so 0711; the folder above it keeps everyone else out."""
        if spec.limits.network != NetworkMode.EGRESS:
            return None
        if self._egress_root is None:
            raise SandboxStartError(
                "the policy granted the egress network but this daemon runs no egress proxy "
                "(egress.enabled is off); nothing ran"
            )
        folder = self._egress_root / secrets.token_hex(len(CONTAINER_FOLDER_SAMPLE) // 2)
        try:
            folder.mkdir(mode=0o700)
            folder.chmod(0o711)
        except OSError as exc:
            raise SandboxStartError(f"cannot make the egress proxy's folder: {exc}") from exc
        return EgressMounts(folder=folder, ca_bundle=self._ca_bundle)

    def _create(
        self,
        spec: SandboxSpec,
        tool_use_id: str,
        egress: EgressMounts | None,
        sources: dict[str, str],
    ) -> dict[str, Any]:
        image = spec.image or self.image
        try:
            recipe = container_recipe(
                spec,
                image=image,
                runner_source=self._runner_source,
                instance_id=self.instance_id,
                tool_use_id=tool_use_id,
                idle_exit_s=self._idle_exit_s,
                egress=egress,
                sources=sources,
            )
        except ValueError as exc:
            raise SandboxStartError(str(exc)) from exc
        try:
            host_config = self.api.create_host_config(**recipe.host_config_kwargs)
            created: dict[str, Any] = self.api.create_container(
                host_config=host_config, **recipe.create_kwargs
            )
        except docker.errors.ImageNotFound as exc:
            advice = (
                "build it with `make image` or configure an existing image"
                if image == self.image
                else "the operator's tool names it: build or load it on this host (images are "
                "never pulled)"
            )
            raise SandboxStartError(f"sandbox image {image} is not present; {advice}") from exc
        except _ENGINE_ERRORS as exc:
            log.warning("the engine refused to create a sandbox container: %s", exc)
            raise SandboxStartError(SET_UP_CHANGED) from exc
        return created

    def _start_sync(self, spec: SandboxSpec, tool_use_id: str) -> tuple[str, _AttachConnection]:
        if not spec.workspace.is_absolute():
            raise SandboxStartError(f"workspace {spec.workspace} is not an absolute path")
        if self._stage is None:
            return self._start_from(spec, tool_use_id, {})
        with self._stage.holding(spec) as sources:  # until the engine mounted them: started
            return self._start_from(spec, tool_use_id, sources)

    def _start_from(
        self, spec: SandboxSpec, tool_use_id: str, sources: dict[str, str]
    ) -> tuple[str, _AttachConnection]:
        egress = self._egress_mounts(spec)
        try:
            created = self._create(spec, tool_use_id, egress, sources)
        except BaseException:
            if egress is not None:
                shutil.rmtree(egress.folder, ignore_errors=True)
            raise
        container_id = str(created["Id"])
        self._track(container_id)
        if egress is not None:
            with self._live_lock:
                self._egress_folders[container_id] = egress.folder
        conn: _AttachConnection | None = None
        try:
            if self._closed:
                raise SandboxStartError("the sandbox backend closed while the container started")
            # Attach before start: the runner stays silent until it has the request, so nothing
            # can be missed, and the first byte of its answer is already on its way to us.
            params = {"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
            conn = _AttachConnection(self.api.attach_socket(container_id, params=params))
            self.api.start(container_id)
            pid = int(self.api.inspect_container(container_id)["State"]["Pid"] or 0)
            self._bound_sockets(container_id, pid, spec.limits.memory_mb)
            self._check_mounts(container_id, pid, spec, egress)
        except BaseException as exc:
            if conn is not None:
                conn.close()
            _release_response(exc)
            self._remove_sync(container_id)
            if isinstance(exc, SandboxStartError):
                raise
            if isinstance(exc, _ENGINE_ERRORS):
                log.warning(
                    "the engine refused to start sandbox container %s: %s", container_id[:12], exc
                )
                raise SandboxStartError(SET_UP_CHANGED) from exc
            raise
        return container_id, conn

    def _check_mounts(
        self, container_id: str, pid: int, spec: SandboxSpec, egress: EgressMounts | None
    ) -> None:
        """Every mount of the started container where it was asked for (`mount_check`), before
        any request reaches it; SET_UP_CHANGED otherwise (the detail goes to the log). A daemon
        that cannot read a container's mount table (not root) says so once and relies on the
        runner's own check."""
        try:
            points = read_mount_points(pid)
        except OSError as exc:
            # Missing: it ended, or this daemon does not see it (a PID namespace of its own,
            # hidepid, systemd's ProtectProc); the engine tells which, unless it lags behind a
            # container that ended at once: a daemon that read one table before sees them all.
            if not isinstance(exc, PermissionError) and (
                self._mounts_seen or not reaper.still_running(self.api, container_id)
            ):
                log.warning("sandbox container %s ended as it started: %s", container_id[:12], exc)
                raise SandboxStartError(SET_UP_CHANGED) from exc
            if not self._mounts_unchecked:
                self._mounts_unchecked = True
                log.warning(
                    "the daemon cannot read the sandbox containers' mount tables (run it as "
                    "root, in the host's PID namespace): where their repository's mounts landed "
                    "is checked by their runner alone, after it started"
                )
            return
        self._mounts_seen = True
        ours = [RUNNER_TARGET, TMP_DIR, *(egress_targets(egress) if egress is not None else ())]
        workspace = str(spec.workspace)
        pins = [p.path for p in spec.git_pins]
        why = misplaced(points, workspace, pins, ours, submounts_below(workspace))
        if why:
            log.warning("sandbox container %s refused: %s", container_id[:12], why)
            raise SandboxStartError(SET_UP_CHANGED)

    def _bound_sockets(self, container_id: str, pid: int, memory_mb: int) -> None:
        """Its socket buffers charged to it and bounded (`bound_socket_memory`), before any
        request reaches it."""
        try:
            if pid <= 0:
                log.warning("sandbox container %s ended as it started", container_id[:12])
                raise SandboxStartError(SET_UP_CHANGED)
            if not bound_socket_memory(container_id, pid, memory_mb) and not self._unbounded:
                self._unbounded = True
                log.warning(
                    "the daemon cannot set the sandbox containers' TCP memory limit (it sees "
                    "neither their processes nor their memory cgroups, or may not write there: "
                    "run it as root with /sys/fs/cgroup writable): on this cgroup v1 host their "
                    "socket buffers are neither bounded nor charged to them"
                )
        except (OSError, ValueError) as exc:
            log.warning(
                "cannot bound the socket memory of sandbox container %s: %s", container_id[:12], exc
            )
            raise SandboxStartError(SET_UP_CHANGED) from exc

    def _discard_started(self, future: asyncio.Future[tuple[str, _AttachConnection]]) -> None:
        """A start finished after its caller was cancelled: remove what it made."""
        if future.cancelled() or future.exception() is not None:
            return
        container_id, conn = future.result()
        conn.close()
        task = asyncio.ensure_future(self.remove(container_id))
        self._cleanups.add(task)
        task.add_done_callback(self._cleanups.discard)

    # --- SandboxBackend -------------------------------------------------------------------------

    async def start(self, spec: SandboxSpec, *, tool_use_id: str = "") -> DockerSandbox:
        if self._closed:
            raise SandboxStartError("the sandbox backend is closed (the daemon is shutting down)")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[str, _AttachConnection]]
        if spec.git_pins:
            # A task: a caller cancelled meanwhile must not end the workspace's turn while the
            # engine still mounts.
            future = asyncio.ensure_future(self._start_pinned(spec, tool_use_id))
        else:
            future = loop.run_in_executor(self._threads, self._start_sync, spec, tool_use_id)
        self._starting.add(future)
        future.add_done_callback(self._starting.discard)
        try:
            container_id, conn = await asyncio.shield(future)
        except asyncio.CancelledError:
            future.add_done_callback(self._discard_started)
            raise
        with self._live_lock:
            folder = self._egress_folders.get(container_id)
        socket_path = folder / EGRESS_SOCKET_NAME if folder is not None else None
        return DockerSandbox(self, container_id, conn, spec, socket_path)

    async def _start_pinned(
        self, spec: SandboxSpec, tool_use_id: str
    ) -> tuple[str, _AttachConnection]:
        """A container holding the workspace's repository: made in the workspace's turn
        (`SetUpGate`), its pins looked at again first."""
        async with self.gate.setting_up(str(spec.workspace)):
            return await self._call(self._start_unmoved, spec, tool_use_id)

    def _start_unmoved(self, spec: SandboxSpec, tool_use_id: str) -> tuple[str, _AttachConnection]:
        why = moved_pin(spec)
        if why:
            log.warning("no sandbox container made over %s: %s", spec.workspace, why)
            raise SandboxStartError(SET_UP_CHANGED)
        return self._start_sync(spec, tool_use_id)

    async def freeze(self, container_id: str) -> FreezeOutcome:
        pause = 0.01
        failure: Exception | None = None
        for _ in range(FREEZE_ATTEMPTS):
            try:
                await self._call(self.api.pause, container_id)
            except docker.errors.NotFound:
                return "gone"
            except _ENGINE_ERRORS as exc:
                failure = exc
            else:
                return "frozen"
            # Already paused, stopping, stopped: the engine's state says which, not its words;
            # the runtime refuses a container whose runner just exited while the engine still
            # says it runs (attacker round 121), so it is asked again.
            state = await self._call(self._state_of, container_id)
            if state in ("gone", "stopped"):
                return state
            if state == "frozen" and "already paused" in str(failure):
                return state
            await asyncio.sleep(pause)
            pause *= 2
        log.warning("cannot freeze sandbox container %s: %s", container_id[:12], failure)
        if isinstance(failure, docker.errors.APIError):  # answered, and refused every time
            raise Unfreezable(SET_UP_CHANGED) from failure
        raise SandboxStartError(SET_UP_CHANGED) from failure

    async def gone(self, container_id: str) -> bool:
        return not await self.exists(container_id)

    async def stop(self, container_id: str) -> bool:
        self._stopped_for_set_up[container_id] = None
        while len(self._stopped_for_set_up) > _STOPPED_KEPT:
            del self._stopped_for_set_up[next(iter(self._stopped_for_set_up))]
        return await self.remove(container_id)

    def stopped_for_set_up(self, container_id: str) -> bool:
        """Whether `stop` ended the container (its call is told why)."""
        return container_id in self._stopped_for_set_up

    def _state_of(self, container_id: str) -> FreezeOutcome | None:
        """What the engine says of a container: None when it runs unfrozen, or it cannot tell."""
        try:
            state = self.api.inspect_container(container_id).get("State") or {}
        except docker.errors.NotFound:
            return "gone"
        except _ENGINE_ERRORS:
            return None
        if state.get("Paused"):
            return "frozen"
        return None if state.get("Running") else "stopped"

    async def thaw(self, container_id: str) -> None:
        try:
            await self._call(self.api.unpause, container_id)
        except docker.errors.NotFound:
            pass
        except _ENGINE_ERRORS as exc:
            # Removed or stopped while it was frozen (its call ended): nothing left to thaw.
            if await self._call(self._state_of, container_id) in ("frozen", None):
                log.error("cannot thaw sandbox container %s: %s", container_id[:12], exc)

    async def ping(self) -> bool:
        try:
            return bool(await self._call(self.api.ping))
        except Exception:  # noqa: BLE001 - any failure to answer means unhealthy
            return False

    async def remove(self, container_id: str) -> bool:
        """Kill and remove one container (idempotent), and return once it is gone: a call is
        not over while processes of its container may still write. The engine refuses to remove
        a container whose processes do not die (stuck in the kernel: attacker round 95 held an
        ext4 truncate for 15 s, Docker gave up after 12, the daemon answered the call as timed
        out, and a rename waiting on the truncate put a `.git` in place 3.5 s after the answer
        and after the daemon's look for one); it is asked again once it has stopped, for up to
        REMOVAL_PATIENCE_S. An engine that does not answer is not waited for (the reaper
        retries), nor is anything once the backend closes. Whether it is known gone (else it
        may still hold memory: see `exists`)."""
        gone = await self._remove_patiently(container_id)
        if gone:
            self.gate.forget(container_id)
        return gone

    async def _remove_patiently(self, container_id: str) -> bool:
        deadline = time.monotonic() + REMOVAL_PATIENCE_S
        pause = 0.05
        # RuntimeError: threads shut down by close(), which removed everything already.
        with contextlib.suppress(RuntimeError):
            if await self._removing(self._remove_sync, container_id):
                return True
            while await self._removing(reaper.still_running, self.api, container_id):
                if self._closed or time.monotonic() >= deadline:
                    log.error(
                        "sandbox container %s still runs %.0f s after it was killed; what its "
                        "processes do may land in its workspace after its call ended",
                        container_id[:12],
                        time.monotonic() - deadline + REMOVAL_PATIENCE_S,
                    )
                    return False
                await asyncio.sleep(pause)
                pause = min(pause * 2, 1.0)
            # Stopped now (or gone, or the engine cannot tell): once more; a failure is logged
            # and the periodic sweep retries.
            if await self._removing(self._remove_sync, container_id):
                return True
            return not await self.exists(container_id)
        return True

    async def exists(self, container_id: str) -> bool:
        return await self._removing(reaper.exists, self.api, container_id)

    async def reap(self) -> int:
        removed = await self._removing(reaper.reap_instance, self.api, self.instance_id)
        with self._live_lock:
            self._live.clear()
        return removed

    async def reap_untracked(self) -> int:
        with self._live_lock:
            keep = frozenset(self._live)
        return await self._removing(
            lambda: reaper.reap_instance(
                self.api, self.instance_id, keep=keep, min_age_s=self._untracked_min_age_s
            )
        )

    @classmethod
    async def reap_instance(
        cls, instance_id: str, client: docker.DockerClient | None = None
    ) -> int:
        """Remove every container a (previous) daemon instance left behind, in any state."""

        def reap() -> int:
            own = client or engine_client()
            try:
                return reaper.reap_instance(own.api, instance_id)
            finally:
                if client is None:
                    own.close()

        return await asyncio.to_thread(reap)

    def live_ids(self) -> frozenset[str]:
        """Containers created and not yet known to be removed."""
        with self._live_lock:
            return frozenset(self._live)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        # Starts still in a worker thread (their callers may be gone): let them finish, so what
        # they created is tracked (or already handed to a cleanup) before the sweep below.
        while self._starting or self._cleanups:
            await asyncio.gather(*self._starting, *self._cleanups, return_exceptions=True)
        with self._live_lock:
            live = list(self._live)
        await asyncio.gather(*(self._removing(self._remove_sync, cid) for cid in live))
        try:
            await self._removing(reaper.wait_until_gone, self.api, self.instance_id, 10.0)
        except _ENGINE_ERRORS as exc:
            log.warning("could not verify that all sandbox containers are gone: %s", exc)
        self._threads.shutdown(wait=True)
        self._removals.shutdown(wait=True)
        if self._stage is not None:
            self._stage.close()
        if self._owns_client:
            self._client.close()


class DockerSandbox(Sandbox):
    """One started container whose runner waits for exactly one request (or, for an MCP
    server kept for a session, for one call after another while its session is open)."""

    def __init__(
        self,
        backend: DockerBackend,
        container_id: str,
        conn: _AttachConnection,
        spec: SandboxSpec,
        egress_socket: Path | None = None,
    ) -> None:
        self._backend = backend
        self._egress_socket = egress_socket
        self._id = container_id
        self._conn = conn
        self._workspace_path = str(spec.workspace)
        self._forwarder_uid = spec.run_as[0] if spec.no_root and spec.run_as else 0
        self._workspace = {
            "workspace": self._workspace_path,
            "workspace_id": list(spec.workspace_id),
            "pins": [pin.model_dump(mode="json") for pin in spec.git_pins],
        }
        self._used = False
        self._open = False
        self._demux = AttachDemuxer()
        self._frames: FrameDecoder | None = None
        self._reading = False
        self._destroy_task: asyncio.Future[bool] | None = None

    @property
    def id(self) -> str:
        return self._id

    @property
    def egress_socket(self) -> Path | None:
        return self._egress_socket

    @property
    def forwarder_uid(self) -> int:
        return self._forwarder_uid

    async def run(
        self, request: SandboxRequest, on_output: OutputCallback | None = None
    ) -> SandboxResult:
        follow_up = isinstance(request, McpSessionCall)
        if (self._used or follow_up) and not (self._open and follow_up):
            raise RuntimeError("a sandbox runs exactly one request; start a new one")
        self._used = True
        self._open = False
        if self._destroy_task is not None or self._conn.peer_closed():
            await self.destroy()
            raise SandboxNotDelivered(f"sandbox {self._id[:12]} ended before it got the request")
        if isinstance(request, BashRequest | ExecRequest | McpRequest):
            deadline_s = request.timeout_ms / 1000 + self._backend.grace_s
            max_frame = 7 * request.output_limit_bytes + (1 << 16)  # JSON escapes; stderr
        else:
            deadline_s = self._backend.write_timeout_s
            max_frame = 1 << 20
        frame = await self._frame(request)
        started = time.monotonic()
        self._reading = True
        try:
            async with asyncio.timeout(deadline_s):
                if not follow_up:
                    await self._backend.gate.deliver(self._id, self._workspace_path)
                await self._send(frame)
                timeline.mark("sent")
                message = await self._read_result(max_frame, on_output)
            _mark_runner_phases(message.pop("timeline", None))
            timeline.mark("result")
            result = self._parse(message, started)
            self._open = result.session_open and isinstance(
                request, McpSessionRequest | McpSessionCall
            )
        except TimeoutError:
            # The runner enforces the timeout itself; reaching this means even that failed.
            log.warning("sandbox %s missed its %.1f s deadline; killed", self._id[:12], deadline_s)
            await self.destroy()
            return self._result(started, exit_code=137, timed_out=True)
        except asyncio.CancelledError:
            await self.destroy()
            raise
        except (ProtocolError, OSError, _RunnerGone) as exc:
            stopped_by_us = self._destroy_task is not None
            await self.destroy()
            return self._failure(started, exc, stopped_by_us=stopped_by_us)
        finally:
            self._reading = False
            if not self._open:  # one request only, or the session ended (or failed) here
                self._conn.close()
        return result

    async def _send(self, frame: list[bytes]) -> None:
        loop = asyncio.get_running_loop()
        try:
            for part in frame:
                await loop.sock_sendall(self._conn.sock, part)
        except OSError as exc:
            # The runner acts only on a complete request: a failed send ran nothing.
            await self.destroy()
            raise SandboxNotDelivered(
                f"sandbox {self._id[:12]} refused the request: {exc}"
            ) from exc

    async def _read_result(
        self, max_frame: int, on_output: OutputCallback | None
    ) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        # A session's container answers again: what was read past one result belongs to the next.
        frames = self._frames = self._frames or FrameDecoder(max_frame)
        stderr = bytearray()
        while True:
            data = await loop.sock_recv(self._conn.sock, _RECV_BYTES)
            if not data:
                raise _RunnerGone(bytes(stderr))
            for stream, payload in self._demux.feed(data):
                if stream == STDERR:
                    stderr += payload[: max(0, _STDERR_KEPT - len(stderr))]
                elif stream == STDOUT:
                    for message in frames.feed(payload):
                        if message["type"] == "result":
                            return message
                        if on_output is not None:
                            on_output = self._relay_progress(message, on_output)

    def _relay_progress(
        self, message: dict[str, Any], on_output: OutputCallback
    ) -> OutputCallback | None:
        """Hand a progress chunk to the callback; returns the callback, or None once it failed.

        Called between reads of the attach socket: the callback only appends to a bounded buffer,
        so a slow consumer never stalls the reading. One that raises is dropped, never the call.
        """
        chunk = progress_output(message)
        if chunk is None:
            return on_output
        try:
            on_output(chunk)
        except Exception:  # progress is best effort: the result must still come
            log.warning(
                "progress callback of sandbox %s failed; no more progress for this call",
                self._id[:12],
                exc_info=True,
            )
            return None
        return on_output

    def _result(self, started: float, **fields: Any) -> SandboxResult:
        duration_ms = int((time.monotonic() - started) * 1000)
        return SandboxResult(sandbox_id=self._id, duration_ms=duration_ms, **fields)

    def _parse(self, message: dict[str, Any], started: float) -> SandboxResult:
        if message.get("mounts_changed") is True:
            log.warning(
                "the runner of sandbox container %s refused its mounts: %s",
                self._id[:12],
                str(message.get("error", ""))[:500],
            )
            return self._result(started, exit_code=-1, error=SET_UP_CHANGED)
        fields = {key: value for key, value in message.items() if key in _RESULT_FIELDS}
        try:
            return self._result(started, **fields)
        except ValueError as exc:
            return self._result(
                started, exit_code=-1, error=f"the sandbox answered with a malformed result: {exc}"
            )

    def _failure(self, started: float, exc: Exception, *, stopped_by_us: bool) -> SandboxResult:
        if self._backend.stopped_for_set_up(self._id):
            return self._result(started, exit_code=-1, error=STOPPED_FOR_SET_UP)
        if stopped_by_us and not isinstance(exc, ProtocolError):
            # Destroyed by us (shutdown) while it ran: a cancellation, not a failure.
            return self._result(started, exit_code=-1, cancelled=True)
        detail = str(exc)
        if isinstance(exc, _RunnerGone):
            detail = "its runner ended without answering"
            if exc.stderr:
                last = exc.stderr.decode("utf-8", "replace").strip().splitlines()[-1:]
                detail += f" ({' '.join(last)[:300]})"
        return self._result(
            started,
            exit_code=-1,
            error=f"the sandbox failed: {detail}; the request may have been partly carried out, "
            "check its effects before retrying",
        )

    async def _frame(self, request: SandboxRequest) -> list[bytes]:
        """The request's frame, and a Write's content as raw UTF-8 after it (as JSON, control
        characters would cost 6 bytes each: attacker round 105 made the daemon hold 300 MB for
        one 15 MiB Write); many megabytes are encoded in a worker thread, so other calls are not
        held up meanwhile."""

        def encoded() -> list[bytes]:
            header = {"v": PROTOCOL_VERSION, **self._workspace}
            if isinstance(request, WriteFileRequest):
                with contextlib.suppress(UnicodeEncodeError):  # lone surrogates: as JSON escapes
                    data = request.content.encode("utf-8")
                    fields = request.model_dump(mode="json", exclude={"content"})
                    return [encode_frame({**header, **fields, ATTACHED_BYTES: len(data)}), data]
            return [encode_frame({**header, **request.model_dump(mode="json")})]

        if isinstance(request, WriteFileRequest) and len(request.content) > _INLINE_FRAME_CHARS:
            return await asyncio.to_thread(encoded)
        return encoded()

    @property
    def gone(self) -> bool:
        task = self._destroy_task
        if task is None or not task.done() or task.cancelled() or task.exception() is not None:
            return False
        return task.result()

    async def destroy(self) -> None:
        """Remove the container and return once it is gone (`DockerBackend.remove`), however
        often the caller is cancelled meanwhile: a cancellation is raised once it is. A call is
        not over while its container's processes may write (attacker round 96: a client's cancel
        during a removal the engine had refused let the call unwind, and the repository look
        after it ran while a process stuck in the kernel went on to rename a `.git` into
        place)."""
        if self._destroy_task is None:
            self._destroy_task = asyncio.ensure_future(self._backend.remove(self._id))
            if not self._reading:
                self._conn.close()
        await _to_the_end(self._destroy_task)


async def _to_the_end(task: asyncio.Future[bool]) -> None:
    """Wait for `task` until it is done, through any cancellation of the waiter, which is raised
    once the task is (its own outcome otherwise)."""
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.cancelled():  # the waiter's, not the task's own
                cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    await task


#: A file's content up to this many characters is encoded on the event loop (beyond, a thread).
_INLINE_FRAME_CHARS = 64 * 1024

#: The marks a runner reports (sandbox/runner/runner.py), in order; nothing else is taken.
RUNNER_MARKS = ("received", "spawned", "exited", "answered")


def _mark_runner_phases(reported: object) -> None:
    """Put the runner's marks (the host's monotonic clock, which containers share) on the call's
    timeline. Only known names with numbers are taken, each no earlier than the mark before it
    and no later than now (Timeline.mark): what the container says moves no phase elsewhere."""
    if not isinstance(reported, list):
        return
    for entry in reported[: len(RUNNER_MARKS)]:
        if not (isinstance(entry, list) and len(entry) == 2 and entry[0] in RUNNER_MARKS):
            continue
        at = entry[1]
        # A float as JSON gives it; not an int, which may be too large for one.
        if type(at) is float and math.isfinite(at):
            timeline.mark(f"runner_{entry[0]}", at)


class _RunnerGone(Exception):
    """The attach stream ended before a result arrived."""

    def __init__(self, stderr: bytes) -> None:
        super().__init__("the sandbox runner ended without answering")
        self.stderr = stderr
