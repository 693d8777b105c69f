"""Integration fixtures: a real daemon with the real OPA (and Docker when the test needs it)."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from bench.processes import unmount_below
from sandbox.backend import LABEL_INSTANCE
from tests.integration.harness import RunningDaemon, running_daemon


@pytest.fixture(scope="session")
def short_tmp() -> Iterator[Path]:
    """A short temporary folder: unix socket paths must stay under ~100 bytes."""
    with tempfile.TemporaryDirectory(prefix="tj-") as folder:
        try:
            yield Path(folder)
        finally:
            unmount_below(Path(folder))


@pytest.fixture(scope="session")
def host_daemon(short_tmp: Path) -> Iterator[RunningDaemon]:
    """A daemon with the real OPA and no sandbox, shared by the host-tool tests."""
    workspace = short_tmp / "ws-host"
    workspace.mkdir()
    with running_daemon(workspace, short_tmp / "host.sock", sandbox={"enabled": False}) as daemon:
        yield daemon


@pytest.fixture
def workdir(host_daemon: RunningDaemon, request: pytest.FixtureRequest) -> Path:
    """A fresh folder inside the shared daemon's workspace for one test."""
    folder = host_daemon.workspace.resolve() / request.node.name.replace("[", "_").replace("]", "")
    folder.mkdir()
    return folder


OWNER_UID = 1000
OWNER_GID = 1000


def containers_of(instance_id: str) -> list[object]:
    """Every container (any state) labelled with the daemon instance."""
    client = docker.from_env()
    try:
        # sparse: no per-container inspect, which races with removals (404 on a gone container)
        return client.containers.list(
            all=True, sparse=True, filters={"label": f"{LABEL_INSTANCE}={instance_id}"}
        )
    finally:
        client.close()


def wait_no_containers(instance_id: str, timeout_s: float = 120.0, keep: int = 0) -> int:
    """Wait until at most `keep` containers (the warm pool) of the instance remain."""
    deadline = time.monotonic() + timeout_s
    count = len(containers_of(instance_id))
    while count > keep and time.monotonic() < deadline:
        time.sleep(0.2)
        count = len(containers_of(instance_id))
    return count


@pytest.fixture(scope="session")
def sandbox_daemon(short_tmp: Path) -> Iterator[RunningDaemon]:
    """A daemon with the real Docker sandbox over a workspace owned by a non-root user."""
    workspace = short_tmp / "ws-sandbox"
    workspace.mkdir()
    os.chown(workspace, OWNER_UID, OWNER_GID)
    with running_daemon(
        workspace,
        short_tmp / "sandbox.sock",
        sandbox={"pool_size": 1, "ceilings": {"memory_mb": 128, "pids": 128}},
    ) as daemon:
        if daemon.daemon.sandbox is None or daemon.daemon.sandbox.stats() is None:
            pytest.skip("no Docker engine answers")
        yield daemon
    assert containers_of(daemon.daemon.instance_id) == [], (
        "containers left after the daemon stopped"
    )


@pytest.fixture
def sandbox_dir(sandbox_daemon: RunningDaemon, request: pytest.FixtureRequest) -> Path:
    """A fresh folder, owned by the workspace owner, inside the sandbox daemon's workspace."""
    name = request.node.name.replace("[", "_").replace("]", "")
    folder = sandbox_daemon.workspace.resolve() / name
    folder.mkdir()
    os.chown(folder, OWNER_UID, OWNER_GID)
    return folder
