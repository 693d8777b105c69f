"""Exit statuses that are answers, on real commands in the Docker sandbox: grep/rg finding no
match, diff/cmp finding differences, test/[ being false and git diff --exit-code/--quiet finding
changes are not errors (the text says what exit 1 means) and do not cancel parallel siblings;
everything else that exits non-zero still is an error."""

from __future__ import annotations

import os
from pathlib import Path
from shlex import quote

import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from tests.integration.conftest import OWNER_GID, OWNER_UID
from tests.integration.harness import RunningDaemon, text_of
from tests.integration.test_scheduling import tool_use

pytestmark = [pytest.mark.integration, pytest.mark.docker]


@pytest.fixture
def files(sandbox_dir: Path) -> Path:
    for name, text in (("a.txt", "alpha\nbeta\n"), ("b.txt", "alpha\ngamma\n")):
        (sandbox_dir / name).write_text(text)
        os.chown(sandbox_dir / name, OWNER_UID, OWNER_GID)
    return sandbox_dir


@pytest.mark.parametrize(
    ("command", "meaning"),
    [
        ("grep needle {d}/a.txt", "no match found"),
        ("cat {d}/a.txt | grep -n needle", "no match found"),
        ("diff {d}/a.txt {d}/b.txt", "the files differ"),
        ("cmp {d}/a.txt {d}/b.txt", "the files differ"),
        ("test -f {d}/missing.txt", "the condition is false"),
        ("[ -s {d}/missing.txt ]", "the condition is false"),
        ("[[ -d {d}/missing ]]", "the condition is false"),
    ],
    ids=["grep", "pipeline", "diff", "cmp", "test", "bracket", "double-bracket"],
)
def test_exit_1_that_answers_is_not_an_error(
    sandbox_daemon: RunningDaemon, files: Path, command: str, meaning: str
) -> None:
    answered = sandbox_daemon.execute("Bash", {"command": command.format(d=quote(str(files)))})
    assert not answered.result.is_error, text_of(answered)
    assert answered.report.exit_code == 1
    assert text_of(answered).startswith(f"Exit code 1: {meaning} (not an error)")


def test_git_diff_exit_code_finding_changes_is_not_an_error(
    sandbox_daemon: RunningDaemon, files: Path
) -> None:
    d = quote(str(files))
    setup = (
        f"cd {d} && git init -q . && git add a.txt && GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@t "
        "GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@t git commit -qm a && echo changed >> a.txt"
    )
    assert not sandbox_daemon.execute("Bash", {"command": setup}).result.is_error
    answered = sandbox_daemon.execute("Bash", {"command": f"git -C {d} diff --exit-code"})
    assert not answered.result.is_error, text_of(answered)
    assert text_of(answered).startswith("Exit code 1: there are differences (not an error)")


@pytest.mark.parametrize(
    "command",
    [
        "! grep alpha {d}/a.txt",  # 1: it matched
        "grep alpha {d}/missing.txt",  # 2: grep could not read
        "grep needle {d}/a.txt && echo found",
        "cd {d}/missing-dir && grep needle a.txt",  # cd's own exit 1
        "grep() {{ cat /nonexistent; }}; grep foo /dev/null",  # not grep at all
        "set -e; cp /nonexistent /tmp/x; grep -q zzz /dev/null",
        "false",
    ],
    ids=["negated", "unreadable", "and-list", "cd-failed", "shadowed", "set-e", "false"],
)
def test_other_failures_stay_errors(
    sandbox_daemon: RunningDaemon, files: Path, command: str
) -> None:
    answered = sandbox_daemon.execute("Bash", {"command": command.format(d=quote(str(files)))})
    assert answered.result.is_error and text_of(answered).startswith("Exit code ")
    assert "not an error" not in text_of(answered)


def test_an_answer_does_not_cancel_the_parallel_siblings(
    sandbox_daemon: RunningDaemon, files: Path
) -> None:
    uses = [
        tool_use("q1", "Bash", command=f"grep needle {quote(str(files / 'a.txt'))}"),
        tool_use("q2", "Bash", command=f"sleep 2; cat {quote(str(files / 'b.txt'))}"),
    ]
    answers = list(sandbox_daemon.stub.ExecuteBatch(pb.ExecuteBatchRequest(tool_uses=uses)))
    assert [a.result.tool_use_id for a in answers] == ["q1", "q2"]
    assert not answers[0].result.is_error and "no match found" in text_of(answers[0])
    assert not answers[1].result.is_error and "gamma" in text_of(answers[1])
