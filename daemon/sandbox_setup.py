"""Starting and stopping the Docker sandbox for the daemon (reaping a predecessor's leftovers)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from daemon.config import Settings, clamp_limits
from daemon.session import Session
from sandbox.backend import SandboxError, SandboxSpec
from sandbox.docker_backend import DockerBackend
from sandbox.executor import SandboxExecutor
from sandbox.image import default_image_ref

log = logging.getLogger(__name__)


async def start_sandbox_executor(
    settings: Settings, instance_id: str, warm_workspace: Path
) -> SandboxExecutor | None:
    """A running SandboxExecutor, or None (logged) when no Docker engine answers. The default
    workspace's pool warms up in the background, so the first call does not pay a cold start."""
    image = settings.sandbox.image or default_image_ref()
    try:
        backend = DockerBackend(image=image, instance_id=instance_id)
    except Exception as exc:  # noqa: BLE001 - docker.errors.DockerException and OS errors alike
        log.error("Docker is not available (%s); sandboxed tools will refuse to run", exc)
        return None
    try:
        reaped = await backend.reap()
    except Exception as exc:  # noqa: BLE001 - the engine may be down; calls will say so
        log.error("Docker does not answer (%s); sandboxed calls fail until it does", exc)
    else:
        if reaped:
            log.warning("removed %d leftover containers of a previous daemon", reaped)
    executor = SandboxExecutor(
        backend, pool_size=settings.sandbox.pool_size, idle_ttl_s=settings.sandbox.idle_ttl_s
    )
    if settings.sandbox.pool_size:
        limits = clamp_limits(settings.sandbox.defaults, settings.sandbox.ceilings)
        spec = SandboxSpec(workspace=warm_workspace, limits=limits)
        task = asyncio.create_task(_warm(executor, spec), name="sandbox-warm")
        _BACKGROUND.add(task)
        task.add_done_callback(_BACKGROUND.discard)
    return executor


_BACKGROUND: set[asyncio.Task[None]] = set()


async def _warm(executor: SandboxExecutor, spec: SandboxSpec) -> None:
    try:
        await executor.warm(spec)
    except SandboxError as exc:
        log.error("could not pre-start sandbox containers: %s", exc)


async def stop_sandbox_executor(executor: SandboxExecutor) -> None:
    """Destroy every container the executor holds or runs."""
    await executor.close()


async def remove_session_containers(executor: SandboxExecutor, session: Session) -> int:
    """Destroy the warm containers kept for a closed session; returns how many."""
    removed: int = await executor.discard_workspace(str(session.workspace))
    return removed
