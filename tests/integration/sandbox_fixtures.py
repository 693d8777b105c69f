"""Fixtures for tests against the real Docker engine and the sandbox image.

Import the ones a module needs as module attributes (`backend = sandbox_fixtures.backend`).
Every backend gets its own instance id, and its fixture proves on teardown that no container with
that label is left, in any state.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest

from sandbox.backend import LABEL_INSTANCE, LABEL_MANAGED, SandboxSpec
from sandbox.docker_backend import DockerBackend
from sandbox.executor import SandboxExecutor
from sandbox.image import default_image_ref
from sandbox.mount_check import read_mount_points

#: Owner of test workspaces: not root, so the uid mapping is really exercised.
WORKSPACE_UID = 1000
WORKSPACE_GID = 1000


@pytest.fixture(scope="session")
def docker_client() -> Iterator[docker.DockerClient]:
    try:
        client = docker.from_env(version="auto")
        client.ping()
    except docker.errors.DockerException as exc:
        pytest.skip(f"no Docker engine answers ({exc}); start dockerd to run sandbox tests")
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(scope="session")
def sandbox_image(docker_client: docker.DockerClient) -> str:
    """The image under test: TOOLJAIL_SANDBOX_IMAGE, else the current recipe's tag."""
    ref = os.environ.get("TOOLJAIL_SANDBOX_IMAGE") or default_image_ref()
    try:
        docker_client.images.get(ref)
    except docker.errors.ImageNotFound:
        pytest.skip(f"sandbox image {ref} is not built: run `make image`")
    return ref


@pytest.fixture(scope="session")
def owned_root() -> Iterator[Path]:
    """A folder owned by a non-root uid, under which workspaces are made."""
    root = Path(tempfile.mkdtemp(prefix="tj-sbx-")).resolve()
    try:
        if os.geteuid() == 0:
            os.chown(root, WORKSPACE_UID, WORKSPACE_GID)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def workspace(owned_root: Path, request: pytest.FixtureRequest) -> Path:
    """A fresh workspace for one test, owned like its parent (uid 1000 when tests run as root)."""
    folder = owned_root / f"{request.node.name[:40]}-{uuid.uuid4().hex[:6]}"
    folder.mkdir()
    if os.geteuid() == 0:
        os.chown(folder, WORKSPACE_UID, WORKSPACE_GID)
    return folder


def spec_for(workspace: Path, **fields: Any) -> SandboxSpec:
    """A container spec over a test workspace, as the daemon makes one: the workspace's device
    and inode, and its (non-root) owner as the identity commands run as."""
    info = workspace.stat()
    run_as = (info.st_uid, info.st_gid) if info.st_uid else (WORKSPACE_UID, WORKSPACE_GID)
    return SandboxSpec(
        workspace=workspace, workspace_id=(info.st_dev, info.st_ino), run_as=run_as, **fields
    )


def instance_containers(client: docker.DockerClient, instance_id: str) -> list[str]:
    """Ids of every container of the instance, in any state."""
    filters = {"label": [f"{LABEL_MANAGED}=true", f"{LABEL_INSTANCE}={instance_id}"]}
    return [c["Id"] for c in client.api.containers(all=True, filters=filters)]


def assert_no_containers(
    client: docker.DockerClient, instance_id: str, within_s: float = 10.0
) -> None:
    """Fails unless the instance has no container (removals finishing in the engine are waited
    for, briefly)."""
    deadline = time.monotonic() + within_s
    while (left := instance_containers(client, instance_id)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert left == [], f"containers of instance {instance_id} leaked: {left}"


@pytest.fixture
def instance_id() -> str:
    return f"test-{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def backend(
    docker_client: docker.DockerClient, sandbox_image: str, instance_id: str, tmp_path: Path
) -> AsyncIterator[DockerBackend]:
    """A backend as a root daemon has it: mount sources bound by descriptor for the engine."""
    stage = tmp_path / "stage"
    made = DockerBackend(
        image=sandbox_image, instance_id=instance_id, client=docker_client, stage_root=stage
    )
    try:
        yield made
    finally:
        await made.close()
        assert_no_containers(docker_client, instance_id)
        assert not any(point.startswith(str(stage)) for point in read_mount_points("self"))


@pytest.fixture
async def executor(backend: DockerBackend) -> AsyncIterator[SandboxExecutor]:
    made = SandboxExecutor(backend, pool_size=1, close_backend=False)
    try:
        yield made
    finally:
        await made.close()
