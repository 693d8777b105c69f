"""Operator tools from the policy folder's tools/, through a real daemon: real OPA, real Docker.

Each output shape, a failing program, a read-only tool held to it by the mount, another local
image, the policy seeing the tool's origin, and reloads: a new tool appears, a bad definition is
refused with its file and field while the tools in force keep serving."""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon._generated.tooljail.v1 import executor_pb2_grpc as pb_grpc
from tests.integration.conftest import OWNER_GID, OWNER_UID
from tests.integration.harness import RunningDaemon, git, policy_repo, running_daemon, text_of
from tests.integration.sandbox_fixtures import docker_client, sandbox_image

pytestmark = [pytest.mark.integration, pytest.mark.docker]

__all__ = ["docker_client", "sandbox_image"]

MARKED_IMAGE = "tooljail-test-operator-image:1"
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n tiny").decode()

WORD_COUNT = '''
name = "WordCount"
description = "Counts the words of a file in the workspace."
read_only = true
concurrency_safe = true
[input_schema]
type = "object"
required = ["file"]
additionalProperties = false
properties.file = { type = "string", minLength = 1 }
[run]
argv = ["python3", "-c", """
import json, sys
request = json.load(sys.stdin)
print(len(open(request["file"]).read().split()), "words")
"""]
'''

SCRIBBLE = """
name = "Scribble"
description = "Declared read-only, but tries to write (the mount refuses)."
read_only = true
[input_schema]
type = "object"
[run]
argv = ["sh", "-c", "echo x > scribbled.txt"]
stdin = "none"
"""

PLOT = f'''
name = "Plot"
description = "Draws a (tiny) chart."
[input_schema]
type = "object"
properties.title = {{ type = "string" }}
[run]
output = "content"
argv = ["python3", "-c", """
import json, sys
title = json.load(sys.stdin).get("title", "")
print(json.dumps({{"content": [{{"type": "text", "text": "chart: " + title}},
  {{"type": "image", "media_type": "image/png", "data": "{PNG}"}}]}}))
"""]
'''

FAIL = """
name = "Fail"
description = "Always fails."
[input_schema]
type = "object"
[run]
argv = ["sh", "-c", "echo partial; echo broken >&2; exit 3"]
stdin = "none"
"""

MARKER = f"""
name = "Marker"
description = "Shows the marker of the image it runs in."
[input_schema]
type = "object"
[run]
image = "{MARKED_IMAGE}"
argv = ["cat", "/etc/tooljail-test-marker"]
stdin = "none"
"""

# The policy sees where a tool comes from: this one refuses operator tools asked for "secrets".
ORIGIN_RULE = """package tooljail.authz

import rego.v1

deny contains "operator tools may not look at secrets" if {
\tinput.tool.origin.kind == "operator"
\tcontains(object.get(input.input, "file", ""), "secret")
}
"""


@pytest.fixture(scope="module")
def marked_image(docker_client: docker.DockerClient, sandbox_image: str) -> Iterator[str]:
    """The sandbox image plus a marker file, built locally (FROM a local image: no pull)."""
    dockerfile = f"FROM {sandbox_image}\nRUN echo operator-image > /etc/tooljail-test-marker\n"
    docker_client.images.build(
        fileobj=io.BytesIO(dockerfile.encode()), tag=MARKED_IMAGE, rm=True, pull=False
    )
    try:
        yield MARKED_IMAGE
    finally:
        docker_client.images.remove(MARKED_IMAGE, force=True)


def _write_tools(repo: Path, tools: dict[str, str]) -> None:
    folder = repo / "policies" / "tools"
    folder.mkdir(exist_ok=True)
    for name, text in tools.items():
        (folder / name).write_text(textwrap.dedent(text))


@pytest.fixture(scope="module")
def world(short_tmp: Path, marked_image: str) -> Iterator[tuple[RunningDaemon, Path, Path]]:
    repo = policy_repo(short_tmp / "operator-repo")
    _write_tools(
        repo,
        {"wc.toml": WORD_COUNT, "scribble.toml": SCRIBBLE, "plot.toml": PLOT, "fail.toml": FAIL,
         "marker.toml": MARKER},
    )  # fmt: skip
    (repo / "policies" / "tooljail" / "authz" / "origin.rego").write_text(ORIGIN_RULE)
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "tools")
    workspace = short_tmp / "ws-operator"
    workspace.mkdir()
    os.chown(workspace, OWNER_UID, OWNER_GID)
    with running_daemon(
        workspace,
        short_tmp / "operator.sock",
        opa={"policies_dir": repo / "policies"},
        sandbox={"pool_size": 0},
    ) as daemon:
        yield daemon, workspace.resolve(), repo


def _tools(daemon: RunningDaemon) -> dict[str, dict[str, object]]:
    listed = json.loads(daemon.stub.ListTools(pb.ListToolsRequest(), timeout=30).tools_json)
    return {tool["name"]: tool for tool in listed}


def test_operator_tools_are_listed_with_their_schema(
    world: tuple[RunningDaemon, Path, Path],
) -> None:
    daemon, _, _ = world
    tools = _tools(daemon)
    assert {"WordCount", "Plot", "Fail", "Marker", "Read", "Bash"} <= set(tools)
    listed = daemon.stub.ListTools(pb.ListToolsRequest(), timeout=30).tools
    origins = {tool.name: tool.origin.kind for tool in listed}
    assert (origins["WordCount"], origins["Bash"]) == ("operator", "builtin")
    schema = tools["WordCount"]["input_schema"]
    assert isinstance(schema, dict) and schema["required"] == ["file"]


def test_a_text_tool_runs_in_the_sandbox_with_the_input_on_stdin(
    world: tuple[RunningDaemon, Path, Path],
) -> None:
    daemon, workspace, _ = world
    (workspace / "poem.txt").write_text("one two three four\n")
    answer = daemon.execute("WordCount", {"file": "poem.txt"})
    assert not answer.result.is_error, text_of(answer)
    assert text_of(answer).strip() == "4 words"
    assert answer.report.sandboxed and answer.report.sandbox_id
    invalid = daemon.execute("WordCount", {"file": ""})
    assert invalid.result.is_error and "should be non-empty" in text_of(invalid)


def test_a_read_only_tool_cannot_write_the_workspace(
    world: tuple[RunningDaemon, Path, Path],
) -> None:
    daemon, workspace, _ = world
    answer = daemon.execute("Scribble", {})
    assert answer.result.is_error and "Read-only file system" in text_of(answer), text_of(answer)
    assert not (workspace / "scribbled.txt").exists()


def test_a_read_only_tool_is_refused_where_the_workspace_holds_other_mounts(
    world: tuple[RunningDaemon, Path, Path],
) -> None:
    """Docker 20.10 makes a read-only bind read-only at its top only: a tmpfs mounted inside the
    workspace stayed writable for a "read-only" tool (attacker round). Such a call is refused."""
    daemon, workspace, _ = world
    inner = workspace / "mounted"
    inner.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(inner)], check=True)
    try:
        answer = daemon.execute("Scribble", {})
    finally:
        subprocess.run(["umount", str(inner)], check=True)
        inner.rmdir()
    assert answer.result.is_error and "filesystems mounted inside it" in text_of(answer)
    assert str(inner) in text_of(answer)


def test_content_blocks_and_failures_map_to_the_tool_result(
    world: tuple[RunningDaemon, Path, Path],
) -> None:
    daemon, _, _ = world
    plot = daemon.execute("Plot", {"title": "sales"})
    assert not plot.result.is_error, text_of(plot)
    kinds = [block.WhichOneof("kind") for block in plot.result.content]
    assert kinds == ["text", "image"] and text_of(plot) == "chart: sales"
    assert plot.result.content[1].image.data == base64.b64decode(PNG)
    fail = daemon.execute("Fail", {})
    assert fail.result.is_error and fail.report.exit_code == 3
    assert "exit code 3" in text_of(fail) and "partial" in text_of(fail)
    assert "broken" in text_of(fail)


def test_a_tool_may_run_in_another_local_image(world: tuple[RunningDaemon, Path, Path]) -> None:
    daemon, _, _ = world
    answer = daemon.execute("Marker", {})
    assert not answer.result.is_error, text_of(answer)
    assert text_of(answer).strip() == "operator-image"


def test_the_policy_sees_the_tools_origin(world: tuple[RunningDaemon, Path, Path]) -> None:
    daemon, workspace, _ = world
    (workspace / "secret.txt").write_text("x\n")
    denied = daemon.execute("WordCount", {"file": "secret.txt"})
    assert denied.decision.outcome == pb.DENY
    assert "operator tools may not look at secrets" in text_of(denied)
    # The built-in Read is not an operator tool: the same file is fine for it.
    read = daemon.execute("Read", {"file_path": str(workspace / "secret.txt")})
    assert read.decision.outcome == pb.ALLOW


def test_reload_adds_tools_and_refuses_bad_ones_keeping_those_in_force(
    world: tuple[RunningDaemon, Path, Path],
) -> None:
    daemon, _, repo = world
    admin = pb_grpc.AdminStub(daemon.channel)
    _write_tools(repo, {"echo.toml": FAIL.replace('"Fail"', '"Echo"').replace("exit 3", "true")})
    added = admin.ReloadPolicies(pb.ReloadPoliciesRequest(), timeout=120)
    assert added.reloaded, added.error
    assert "Echo" in _tools(daemon)
    assert not daemon.execute("Echo", {}).result.is_error

    _write_tools(repo, {"broken.toml": WORD_COUNT.replace('"WordCount"', '"Broken"') + "x = 1\n"})
    refused = admin.ReloadPolicies(pb.ReloadPoliciesRequest(), timeout=120)
    assert not refused.reloaded
    assert "tools/broken.toml: run.x: Extra inputs are not permitted" in refused.error
    assert {"Echo", "WordCount"} <= set(_tools(daemon)) and "Broken" not in _tools(daemon)
    assert not daemon.execute("Echo", {}).result.is_error
    (repo / "policies" / "tools" / "broken.toml").unlink()
    (repo / "policies" / "tools" / "echo.toml").unlink()
    removed = admin.ReloadPolicies(pb.ReloadPoliciesRequest(), timeout=120)
    assert removed.reloaded and "Echo" not in _tools(daemon)
    gone = daemon.execute("Echo", {})
    assert gone.result.is_error and "Unknown tool 'Echo'" in text_of(gone)
