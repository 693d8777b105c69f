"""The warm pool is shared fairly between principals (real Docker, real OPA): one principal
holds at most its share of the pre-started containers, so another principal's calls still find
warm ones."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon._generated.tooljail.v1 import executor_pb2_grpc as pb_grpc
from tests.integration.conftest import OWNER_GID, OWNER_UID, containers_of
from tests.integration.harness import RunningDaemon, running_daemon
from tests.integration.test_service import free_port

pytestmark = [pytest.mark.integration, pytest.mark.docker]

TOKEN = "alice-token-3f0c"


@pytest.fixture(scope="module")
def shared(short_tmp: Path) -> Iterator[tuple[RunningDaemon, pb_grpc.ExecutorStub]]:
    workspace = short_tmp / "ws-shares"
    workspace.mkdir()
    os.chown(workspace, OWNER_UID, OWNER_GID)
    target = f"127.0.0.1:{free_port()}"
    with running_daemon(
        workspace,
        short_tmp / "shares.sock",
        sandbox={"pool_size": 2, "pool_max": 2, "pool_per_principal": 1},
        tcp={"address": target},
        auth={"tokens": {"alice": TOKEN}},
    ) as daemon:
        if daemon.daemon.sandbox is None or daemon.daemon.sandbox.stats() is None:
            pytest.skip("no Docker engine answers")
        with grpc.insecure_channel(target) as channel:
            yield daemon, pb_grpc.ExecutorStub(channel)
    assert containers_of(daemon.daemon.instance_id) == []


def _bash(stub: pb_grpc.ExecutorStub, session: str, tool_use_id: str, **kw: object) -> None:
    use = pb.ToolUse(id=tool_use_id, name="Bash")
    use.input.update({"command": "echo warm"})
    answer = stub.Execute(pb.ExecuteRequest(tool_use=use, session_id=session), timeout=120, **kw)
    assert not answer.result.is_error, answer.result


def _settled(daemon: RunningDaemon, ready: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        stats = daemon.daemon.sandbox.stats() if daemon.daemon.sandbox else None
        if stats is not None and stats.pooled == ready:
            return
        time.sleep(0.1)
    pytest.fail(f"the pool never held {ready} ready containers: {stats}")


def test_one_principal_cannot_hold_the_whole_pool(
    shared: tuple[RunningDaemon, pb_grpc.ExecutorStub],
) -> None:
    daemon, alice = shared
    # The default session (the Unix socket's principal) is pre-warmed at the start: it would
    # take both places of the pool, but its share is one.
    _settled(daemon, 1)
    time.sleep(1)
    _settled(daemon, 1)
    as_alice = {"metadata": (("authorization", f"Bearer {TOKEN}"),)}
    session = alice.OpenSession(pb.OpenSessionRequest(), timeout=60, **as_alice)
    assert daemon.daemon.sandbox is not None
    before = daemon.daemon.sandbox.stats()
    assert before is not None
    _bash(alice, session.id, "toolu_alice_1", **as_alice)  # cold, then her share is filled
    _settled(daemon, 2)
    _bash(alice, session.id, "toolu_alice_2", **as_alice)
    after = daemon.daemon.sandbox.stats()
    assert after is not None and after.pool_hits == before.pool_hits + 1
    alice.CloseSession(pb.CloseSessionRequest(session_id=session.id), timeout=60, **as_alice)
