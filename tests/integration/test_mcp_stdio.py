"""An upstream MCP server over stdio, run in the sandbox: the test server (written with the
`mcp` SDK) in a local image built FROM the sandbox image with the SDK copied in. Its tools are
listed (in a read-only workspace), called in the caller's workspace as the workspace owner, kept
for the caller's session (state lasts for it, the container goes with it) or started per call
when stateless, and a crash or a hang costs only that call."""

from __future__ import annotations

import importlib.metadata as metadata
import io
import os
import shutil
import tarfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import pytest
from packaging.requirements import Requirement

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from tests.integration.conftest import OWNER_GID, OWNER_UID
from tests.integration.harness import RunningDaemon, running_daemon, text_of
from tests.integration.sandbox_fixtures import docker_client, sandbox_image
from tests.integration.test_mcp_upstream import _names, _policies, _wait_for, progress_messages

pytestmark = [pytest.mark.integration, pytest.mark.docker]

__all__ = ["docker_client", "sandbox_image"]

IMAGE = "tooljail-test-mcp-stdio:1"
SHADOW_MODULE = "planted_server"
SERVER = Path(__file__).with_name("mcp_upstream.py")


def _distributions(*roots: str) -> set[str]:
    """The installed distributions `roots` need (their own requirements, recursively)."""
    seen: set[str] = set()
    stack = list(roots)
    while stack:
        name = stack.pop()
        if name.lower() in seen:
            continue
        seen.add(name.lower())
        for line in metadata.distribution(name).requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                stack.append(requirement.name)
    return seen


def _context(base: str) -> bytes:
    """A build context: the SDK and its requirements (as installed here: the image's python is
    the same minor version), the test server and a Dockerfile."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        # cryptography: the SDK imports it (through its auth support) without requiring it.
        for name in _distributions("mcp", "cryptography"):
            for file in metadata.distribution(name).files or []:
                path = Path(str(file.locate()))
                if path.is_file() and "__pycache__" not in file.parts:
                    tar.add(path, arcname=f"py/{file}")
        tar.add(SERVER, arcname="server.py")
        dockerfile = f"FROM {base}\nCOPY py /opt/mcp-py\nCOPY server.py /opt/mcp-server.py\n"
        dockerfile_bytes = dockerfile.encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile_bytes)
        tar.addfile(info, io.BytesIO(dockerfile_bytes))
    return data.getvalue()


@pytest.fixture(scope="module")
def stdio_image(docker_client: docker.DockerClient, sandbox_image: str) -> Iterator[str]:
    context = _context(sandbox_image)
    docker_client.images.build(fileobj=io.BytesIO(context), custom_context=True, tag=IMAGE,
                               rm=True, pull=False)  # fmt: skip
    try:
        yield IMAGE
    finally:
        docker_client.images.remove(IMAGE, force=True)


@pytest.fixture(scope="module")
def daemon(short_tmp: Path, stdio_image: str) -> Iterator[RunningDaemon]:
    workspace = short_tmp / "ws-mcp-stdio"
    workspace.mkdir()
    os.chown(workspace, OWNER_UID, OWNER_GID)
    policies = _policies(
        short_tmp / "mcp-stdio",
        ("box", "fresh", "shadow"),
        ask_tools=["mcp__box__shout"],
        hidden_tools=["mcp__box__picture"],
    )
    server = {
        "name": "box",
        "command": ["env", "PYTHONPATH=/opt/mcp-py", "python3", "/opt/mcp-server.py", "stdio"],
        "image": stdio_image,
        "timeout_s": 20,
        "defer": "never",
    }
    stateless = {**server, "name": "fresh", "stateless": True}
    # A module the image does not have: only a file in the working directory could provide it.
    shadow = {
        **server,
        "name": "shadow",
        "command": ["env", "PYTHONPATH=/opt/mcp-py", "python3", "-m", SHADOW_MODULE, "stdio"],
    }
    # Planted in the shared default workspace (any principal's default session writes there)
    # before the daemon lists: the test server, to be taken for the operator's.
    (workspace / f"{SHADOW_MODULE}.py").write_text(
        "exec(compile(open('/opt/mcp-server.py').read(), 'planted', 'exec'))\n"
    )
    with running_daemon(
        workspace,
        short_tmp / "mcp-stdio.sock",
        opa={"policies_dir": policies},
        sandbox={"pool_size": 0},
        mcp_servers=[server, stateless, shadow],
    ) as running:
        _wait_for(running, "mcp__box__add")
        _wait_for(running, "mcp__fresh__count")
        yield running
    shutil.rmtree(short_tmp / "mcp-stdio", ignore_errors=True)


def test_a_stdio_servers_tools_run_in_the_sandbox_in_the_callers_workspace(
    daemon: RunningDaemon,
) -> None:
    listed = {t.name: t for t in daemon.stub.ListTools(pb.ListToolsRequest(), timeout=30).tools}
    assert listed["mcp__box__add"].traits.sandboxed
    assert listed["mcp__box__add"].origin == pb.ToolOrigin(kind="mcp", server="box")
    added = daemon.execute("mcp__box__add", {"a": 5, "b": 6})
    assert not added.result.is_error, text_of(added)
    assert text_of(added) == "11" and added.report.sandboxed and added.report.sandbox_id
    wrote = daemon.execute("mcp__box__write_note", {"text": "from the box"})
    assert not wrote.result.is_error, text_of(wrote)
    note = daemon.workspace.resolve() / "note.txt"
    assert note.read_text() == "from the box" and note.stat().st_uid == OWNER_UID
    assert f"as uid {OWNER_UID}" in text_of(wrote)


def test_a_crash_or_a_hang_costs_only_that_call(daemon: RunningDaemon) -> None:
    died = daemon.execute("mcp__box__die", {})
    assert died.result.is_error and "The MCP server box (in the sandbox) failed die" in text_of(
        died
    )
    hung = daemon.execute("mcp__box__sleep", {"seconds": 120})
    assert hung.result.is_error and "did not answer sleep within" in text_of(hung)
    assert text_of(daemon.execute("mcp__box__add", {"a": 1, "b": 1})) == "2"


def _count(daemon: RunningDaemon, server: str, **kw: object) -> tuple[int, str, str]:
    """The server's call count and process, and the container that answered."""
    answered = daemon.execute(f"mcp__{server}__count", {}, **kw)
    assert not answered.result.is_error, text_of(answered)
    calls, _, pid = text_of(answered).partition(" from ")
    return int(calls), pid, answered.report.sandbox_id


def _running(client: docker.DockerClient, container_id: str) -> bool:
    try:
        return bool(client.containers.get(container_id).status == "running")
    except docker.errors.NotFound:
        return False


def test_a_server_lives_for_its_session_and_goes_with_it(
    daemon: RunningDaemon, docker_client: docker.DockerClient
) -> None:
    first = _count(daemon, "box")
    second = _count(daemon, "box")
    assert second[0] == first[0] + 1 and second[1:] == first[1:], (first, second)
    assert _running(docker_client, first[2]), "the session's server is not kept between calls"

    session = daemon.stub.OpenSession(pb.OpenSessionRequest(), timeout=30)
    theirs = _count(daemon, "box", session_id=session.id)
    assert theirs[0] == 1 and theirs[2] != first[2], "another session shared the server"
    wrote = daemon.execute("mcp__box__write_note", {"text": "theirs"}, session_id=session.id)
    assert not wrote.result.is_error, text_of(wrote)
    assert (Path(session.workspace) / "note.txt").read_text() == "theirs"
    daemon.stub.CloseSession(pb.CloseSessionRequest(session_id=session.id), timeout=30)
    _until(lambda: not _running(docker_client, theirs[2]))
    assert _count(daemon, "box")[0] == second[0] + 1, "the default session lost its server"


@pytest.mark.parametrize("server", ["box", "fresh"])
def test_a_servers_progress_reaches_the_stream(daemon: RunningDaemon, server: str) -> None:
    messages = progress_messages(daemon, f"mcp__{server}__steps", {"n": 3})
    assert messages == ["step: 1/3", "step: 2/3", "step: 3/3"]


def test_the_policy_denies_and_asks_for_a_stdio_servers_tools(daemon: RunningDaemon) -> None:
    hidden = daemon.execute("mcp__box__picture", {})
    assert hidden.decision.outcome == pb.DENY and hidden.result.is_error
    asked = daemon.execute("mcp__box__shout", {"text": "hi"}, tool_use_id="toolu_box_shout")
    assert asked.decision.outcome == pb.ASK and asked.decision.approval_token
    approved = daemon.execute(
        "mcp__box__shout",
        {"text": "hi"},
        tool_use_id="toolu_box_shout",
        approval_token=asked.decision.approval_token,
    )
    assert approved.decision.outcome == pb.ALLOW and text_of(approved) == "HI"
    assert approved.report.sandboxed


def test_a_server_is_listed_where_no_callers_file_can_shadow_its_code(
    daemon: RunningDaemon,
) -> None:
    """Attack: servers were listed in the shared default workspace (read-only, but written by
    every principal's default session), so `python3 -m` found a planted module there and its
    tools and descriptions became every tenant's."""
    time.sleep(4)  # the first listing and two retries (1 and 2 s apart) have been tried
    assert not any(name.startswith("mcp__shadow__") for name in _names(daemon))


def test_a_tool_one_sessions_server_adds_is_not_offered_to_everyone(daemon: RunningDaemon) -> None:
    """Attack: a listing read in one caller's container (its server's state, or a file in its
    workspace shadowing the server's code) became every tenant's tools. The daemon lists again
    in a fresh server over the read-only default workspace, which knows no such tool."""
    grown = daemon.execute("mcp__box__grow", {"name": "late_box"})
    assert not grown.result.is_error, text_of(grown)
    time.sleep(5)  # the relisting (a container of its own) has long ended by then
    names = _names(daemon)
    assert "mcp__box__late_box" not in names
    assert "mcp__box__grow" in names  # the fresh listing still has the server's own tools


def test_a_stateless_server_starts_for_each_call(daemon: RunningDaemon) -> None:
    first, second = _count(daemon, "fresh"), _count(daemon, "fresh")
    assert first[0] == second[0] == 1 and first[2] != second[2]


def test_a_kept_server_that_dies_or_hangs_is_started_again_by_the_next_call(
    daemon: RunningDaemon, docker_client: docker.DockerClient
) -> None:
    before = _count(daemon, "box")
    died = daemon.execute("mcp__box__die", {})
    assert died.result.is_error and "The MCP server box (in the sandbox) failed die" in text_of(
        died
    )
    _until(lambda: not _running(docker_client, before[2]))
    after = _count(daemon, "box")
    assert after[0] == 1 and after[2] != before[2]
    hung = daemon.execute("mcp__box__sleep", {"seconds": 120})
    assert hung.result.is_error and "did not answer sleep within" in text_of(hung)
    _until(lambda: not _running(docker_client, after[2]))
    assert _count(daemon, "box")[0] == 1


def _until(condition: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.1)
