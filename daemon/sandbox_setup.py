"""Starting and stopping the Docker sandbox for the daemon (reaping a predecessor's leftovers)."""

from __future__ import annotations

import logging
from typing import Any

from daemon.config import Settings
from sandbox.image import default_image_ref

log = logging.getLogger(__name__)


async def start_sandbox_executor(settings: Settings, instance_id: str) -> Any | None:
    """A running SandboxExecutor, or None (logged) when no Docker engine answers."""
    from sandbox.docker_backend import DockerBackend
    from sandbox.executor import SandboxExecutor

    image = settings.sandbox.image or default_image_ref()
    try:
        backend = DockerBackend(image=image, instance_id=instance_id)
    except Exception as exc:  # noqa: BLE001 - docker.errors.DockerException and OS errors alike
        log.error("Docker is not available (%s); sandboxed tools will refuse to run", exc)
        return None
    reaped = await backend.reap()
    if reaped:
        log.warning("removed %d leftover containers of a previous daemon", reaped)
    return SandboxExecutor(
        backend, pool_size=settings.sandbox.pool_size, idle_ttl_s=settings.sandbox.idle_ttl_s
    )


async def stop_sandbox_executor(executor: Any) -> None:
    """Destroy every container the executor holds or runs."""
    await executor.close()
