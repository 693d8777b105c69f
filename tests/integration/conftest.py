"""Integration fixtures: a real daemon with the real OPA (and Docker when the test needs it)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.harness import RunningDaemon, running_daemon


@pytest.fixture(scope="session")
def short_tmp() -> Iterator[Path]:
    """A short temporary folder: unix socket paths must stay under ~100 bytes."""
    with tempfile.TemporaryDirectory(prefix="tj-") as folder:
        yield Path(folder)


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
