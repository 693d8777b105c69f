"""File names that are not UTF-8 in a workspace (any byte but NUL and / is a valid name on Linux):
every tool that lists, reads or writes through them answers, showing the bytes escaped, and a
batch never loses the answers after one such name. A workspace path that resolves to such a name
gets a clear refusal, never a call that hangs."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from tests.integration.harness import RunningDaemon, running_daemon
from tests.reliability.conftest import Record
from tests.reliability.support import (
    execute,
    open_session,
    owned_workspace,
    policy_with,
    text_of,
    tool_use,
    unique,
)

pytestmark = [pytest.mark.integration, pytest.mark.docker]

BAD = b"bad\xff\xfename"
SHOWN = "bad\\xff\\xfename"
"""How the name appears in an answer: each byte that is not UTF-8 as a \\xNN escape."""


@pytest.fixture(scope="module")
def names_root(rel_tmp: Path) -> Path:
    folder = rel_tmp / "hostile-names"
    folder.mkdir()
    return folder


@pytest.fixture(scope="module")
def names_daemon(names_root: Path, docker_ready: None) -> Iterator[RunningDaemon]:
    with running_daemon(
        owned_workspace(names_root / "default"),
        names_root / f"{unique('nm')}.sock",
        sandbox={"pool_size": 0},
        opa={"policies_dir": policy_with(names_root)},
        workspaces={"budget_mb": 64},
    ) as daemon:
        yield daemon


@pytest.fixture(scope="module")
def tree(names_root: Path) -> Path:
    """roots/names/u/<BAD> holding "inside", and roots/names/link -> it."""
    workspace = owned_workspace(names_root / "roots" / "names")
    owned_workspace(workspace / "u")
    target = bytes(workspace / "u") + b"/" + BAD
    with open(target, "wb") as out:
        out.write(b"inside\n")
    os.chown(target, 1000, 1000)
    os.symlink(target, bytes(workspace / "link"))
    return workspace


@pytest.fixture(scope="module")
def session(names_daemon: RunningDaemon, tree: Path) -> pb.Session:
    return open_session(names_daemon, str(tree))


def test_every_tool_answers_and_shows_the_name_escaped(
    names_daemon: RunningDaemon, tree: Path, session: pb.Session, record: Record
) -> None:
    calls = [
        ("LS", {"path": str(tree / "u")}, SHOWN),
        ("Glob", {"pattern": "**/*name", "path": str(tree)}, SHOWN),
        ("Grep", {"pattern": "inside", "path": str(tree)}, SHOWN),
        ("Grep", {"pattern": "inside", "path": str(tree), "output_mode": "content"}, "inside"),
        ("Read", {"file_path": str(tree / "link")}, ""),
        ("Write", {"file_path": str(tree / "link"), "content": "new\n"}, ""),
        # Command output is text as a terminal shows it: undecodable bytes become U+FFFD.
        ("Bash", {"command": "ls u"}, "bad\ufffd\ufffdname"),
    ]
    answered = 0
    for name, tool_input, expected in calls:
        try:
            answer = execute(names_daemon.stub, name, tool_input, session_id=session.id)
        except grpc.RpcError as exc:
            pytest.fail(f"{name} {tool_input}: {exc.code()} {exc.details()}")
        answered += 1
        assert expected in text_of(answer), (name, text_of(answer))
    record("tools over a name that is not UTF-8", len(calls), answered)
    # Whatever Write did, nothing was lost: the file holds either its old or its new content.
    assert (Path(os.fsdecode(bytes(tree / "u") + b"/" + BAD))).read_bytes() in (
        b"inside\n",
        b"new\n",
    )


def test_a_batch_answers_every_call_after_such_a_name(
    names_daemon: RunningDaemon, tree: Path, session: pb.Session
) -> None:
    uses = [
        tool_use("Read", {"file_path": str(tree / "link")}),
        tool_use("LS", {"path": str(tree / "u")}),
        tool_use("Read", {"file_path": str(tree / "link")}),
        tool_use("Glob", {"pattern": "u/*", "path": str(tree)}),
    ]
    answers = list(
        names_daemon.stub.ExecuteBatch(
            pb.ExecuteBatchRequest(session_id=session.id, tool_uses=uses), timeout=60
        )
    )
    assert [a.result.tool_use_id for a in answers] == [u.id for u in uses]
    assert SHOWN in text_of(answers[1]) and SHOWN in text_of(answers[3])


def test_a_workspace_resolving_to_such_a_name_is_refused_promptly(
    names_daemon: RunningDaemon, names_root: Path
) -> None:
    real = bytes(names_root / "roots") + b"/ws-" + BAD
    os.mkdir(real)
    os.chown(real, 1000, 1000)
    link = names_root / "roots" / "ws-link"
    os.symlink(real, bytes(link))
    with pytest.raises(grpc.RpcError) as refused:
        open_session(names_daemon, str(link))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value.details()


def test_a_shell_left_in_a_folder_named_so_starts_there_next_time(
    names_daemon: RunningDaemon, tree: Path, session: pb.Session
) -> None:
    folder = bytes(tree) + b"/q\xff"
    os.mkdir(folder)
    os.chown(folder, 1000, 1000)
    went = execute(names_daemon.stub, "Bash", {"command": "cd $'q\\xff'"}, session_id=session.id)
    assert not went.result.is_error, text_of(went)
    here = execute(
        names_daemon.stub, "Bash", {"command": "pwd; ls -d ../q*"}, session_id=session.id
    )
    assert not here.result.is_error, text_of(here)
    assert text_of(here).splitlines()[0] == f"{tree}/q\ufffd", text_of(here)
