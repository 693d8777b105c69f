"""A filesystem that never answers, mounted by one tenant in or over its workspace, holds neither
the daemon nor any other tenant: the event loop only asks the kernel's caches, and what must ask
the filesystem waits in that tenant's own threads (daemon.host.loop_safe, daemon.host.threads).

Each test makes a hung FUSE mount (tests/hung_mount.py) as alice, then has bob work while
alice's calls wait on it. A watchdog releases the mount after WATCHDOG_S if the test is stuck:
bob's calls finishing only then would mean they waited for alice's mount.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon._generated.tooljail.v1 import executor_pb2_grpc as pb_grpc
from daemon.config import PROJECT_ROOT
from tests.hung_mount import HungMount, can_mount
from tests.integration.harness import RunningDaemon, running_daemon, text_of
from tests.integration.test_service import free_port

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not can_mount(), reason="a hung mount needs root and /dev/fuse"),
]

TOKENS = {"alice": "alice-token-hung-3f1", "bob": "bob-token-hung-9c2"}
WATCHDOG_S = 60.0
"""Far beyond what bob's calls take on any machine; only reached when they waited for alice."""


@dataclass
class Tenant:
    name: str
    stub: pb_grpc.ExecutorStub
    metadata: tuple[tuple[str, str], ...]

    def open(self, workspace: Path) -> str:
        request = pb.OpenSessionRequest(workspace=str(workspace))
        session: pb.Session = self.stub.OpenSession(
            request, metadata=self.metadata, timeout=WATCHDOG_S * 2
        )
        return session.id

    def call(self, session_id: str, name: str, tool_input: dict[str, Any]) -> pb.ExecuteResponse:
        use = pb.ToolUse(id=f"toolu_{name}_{abs(hash(json.dumps(tool_input))):x}", name=name)
        use.input.update(tool_input)
        request = pb.ExecuteRequest(tool_use=use, session_id=session_id)
        response: pb.ExecuteResponse = self.stub.Execute(
            request, metadata=self.metadata, timeout=WATCHDOG_S * 2
        )
        return response


@dataclass
class World:
    daemon: RunningDaemon
    roots: Path
    alice: Tenant
    bob: Tenant


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    folder = Path(tmp_path_factory.mktemp("hung"))
    policies = folder / "policies"
    shutil.copytree(PROJECT_ROOT / "policies", policies)
    data = json.loads((policies / "data.json").read_text())
    data["tooljail"]["workspace_roots"] = [str(folder / "roots")]
    (policies / "data.json").write_text(json.dumps(data))
    (folder / "roots").mkdir()
    (folder / "ws").mkdir()
    target = f"127.0.0.1:{free_port()}"
    with running_daemon(
        folder / "ws",
        folder / "h.sock",
        sandbox={"enabled": False},
        tcp={"address": target},
        auth={"tokens": TOKENS},
        opa={"policies_dir": policies},
    ) as daemon:
        channel = grpc.insecure_channel(target)
        stub = pb_grpc.ExecutorStub(channel)

        def tenant(name: str) -> Tenant:
            return Tenant(name, stub, (("authorization", f"Bearer {TOKENS[name]}"),))

        yield World(daemon, folder / "roots", tenant("alice"), tenant("bob"))
        channel.close()


def _workspace(world: World, name: str) -> Path:
    folder = world.roots / name
    folder.mkdir()
    (folder / "notes.txt").write_text("plain notes\n")
    return folder


def _bob_works(world: World, name: str) -> None:
    """Bob opens a session and uses every host-side tool in it: all answer."""
    workspace = _workspace(world, name)
    session = world.bob.open(workspace)
    notes = str(workspace / "notes.txt")
    for tool, tool_input, expected in (
        ("Read", {"file_path": notes}, "plain notes"),
        ("Glob", {"pattern": "*.txt"}, "notes.txt"),
        ("Grep", {"pattern": "plain"}, "notes.txt"),
        ("LS", {"path": str(workspace)}, "notes.txt"),
    ):
        answer = world.bob.call(session, tool, tool_input)
        assert not answer.result.is_error and expected in text_of(answer), (tool, text_of(answer))


def _in_background(work: list[Callable[[], Any]]) -> tuple[ThreadPoolExecutor, list[Future[Any]]]:
    pool = ThreadPoolExecutor(len(work))
    return pool, [pool.submit(item) for item in work]


def test_a_hung_mount_inside_a_workspace_holds_only_its_tenants_calls(
    world: World, hung_mount: type[HungMount]
) -> None:
    workspace = _workspace(world, "alice-inside")
    session = world.alice.open(workspace)
    (workspace / "hung").mkdir()
    mount = hung_mount(workspace / "hung")
    inside = str(workspace / "hung")
    # More calls than alice has threads: the rest wait in her line, not in anyone else's.
    calls = [
        ("Read", {"file_path": f"{inside}/a.txt"}),
        ("Read", {"file_path": f"{inside}/b.txt"}),
        ("Glob", {"pattern": "*", "path": inside}),
        ("Grep", {"pattern": "x", "path": inside}),
        ("LS", {"path": inside}),
        ("Read", {"file_path": f"{inside}/c.txt"}),
    ]
    pool, waiting = _in_background(
        [lambda c=c: world.alice.call(session, *c) for c in calls]  # type: ignore[misc]
    )
    try:
        with mount.watchdog(WATCHDOG_S):
            _bob_works(world, "bob-beside-inside")
            assert not any(future.done() for future in waiting), "nothing answered alice's calls"
        assert not mount.released_by_watchdog, "bob's calls waited for alice's hung mount"
    finally:
        mount.release()
        answers = [future.result(WATCHDOG_S) for future in waiting]
        pool.shutdown()
    # Released, every call of alice's is answered (what it says depends on when each thread
    # was let go: an error from the aborted mount, or what the folder under it holds).
    assert [a.result.tool_use_id.split("_")[1] for a in answers] == [name for name, _ in calls]
    # And alice's threads are hers again: her session works.
    notes = world.alice.call(session, "Read", {"file_path": str(workspace / "notes.txt")})
    assert not notes.result.is_error and "plain notes" in text_of(notes)


def test_a_hung_mount_over_a_workspace_is_refused_at_once(
    world: World, hung_mount: type[HungMount]
) -> None:
    workspace = _workspace(world, "alice-over")
    session = world.alice.open(workspace)
    mount = hung_mount(workspace)
    try:
        with mount.watchdog(WATCHDOG_S):
            # Checked from the kernel's records alone: another mount is there now.
            answer = world.alice.call(session, "Read", {"file_path": str(workspace / "x")})
            _bob_works(world, "bob-beside-over")
        assert not mount.released_by_watchdog, "the workspace check asked the hung mount"
    finally:
        mount.release()
    assert answer.result.is_error
    assert "no longer the directory this session was opened on" in text_of(answer)


def test_opening_a_session_over_a_hung_mount_holds_nobody(
    world: World, hung_mount: type[HungMount]
) -> None:
    workspace = world.roots / "alice-open"
    workspace.mkdir()
    mount = hung_mount(workspace)
    pool, (opening,) = _in_background([lambda: world.alice.open(workspace)])
    try:
        with mount.watchdog(WATCHDOG_S):
            _bob_works(world, "bob-beside-open")
            assert not opening.done(), "the session was opened without looking at its workspace"
        assert not mount.released_by_watchdog, "bob waited for alice's hung mount"
    finally:
        mount.release()
        with pytest.raises(grpc.RpcError) as refused:
            opening.result(WATCHDOG_S)
        pool.shutdown()
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value.details()
