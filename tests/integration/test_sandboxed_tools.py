"""Write, Edit, MultiEdit and Bash through the daemon, in real disposable Docker containers."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import grpc
import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from sandbox import after_answer
from sandbox.executor import ExecutorStats
from sandbox.hardening import RUNNER_DIR
from sandbox.runner import RUNNER_SOURCE
from tests.integration.conftest import OWNER_GID, OWNER_UID, containers_of, wait_no_containers
from tests.integration.harness import RunningDaemon, running_daemon, text_of

pytestmark = [pytest.mark.integration, pytest.mark.docker]


def test_write_creates_a_file_owned_by_the_workspace_owner(
    sandbox_daemon: RunningDaemon, sandbox_dir: Path
) -> None:
    target = sandbox_dir / "new" / "hello.txt"
    response = sandbox_daemon.execute("Write", {"file_path": str(target), "content": "hi\nthere\n"})
    assert not response.result.is_error, text_of(response)
    assert response.report.sandboxed and response.report.sandbox_id
    assert target.read_text() == "hi\nthere\n"
    assert target.stat().st_uid == OWNER_UID and target.stat().st_gid == OWNER_GID


def test_write_over_an_unread_file_is_refused(
    sandbox_daemon: RunningDaemon, sandbox_dir: Path
) -> None:
    target = sandbox_dir / "existing.txt"
    target.write_text("keep me\n")
    response = sandbox_daemon.execute("Write", {"file_path": str(target), "content": "gone"})
    assert response.result.is_error
    assert "has not been read" in text_of(response)
    assert target.read_text() == "keep me\n"


def test_read_then_edit_then_stale_edit(sandbox_daemon: RunningDaemon, sandbox_dir: Path) -> None:
    target = sandbox_dir / "code.py"
    target.write_text("def f():\n    return 1\n\ndef g():\n    return 1\n")
    sandbox_daemon.execute("Read", {"file_path": str(target)})
    twice = sandbox_daemon.execute(
        "Edit", {"file_path": str(target), "old_string": "return 1", "new_string": "return 2"}
    )
    assert twice.result.is_error and "2" in text_of(twice)
    edited = sandbox_daemon.execute(
        "Edit",
        {
            "file_path": str(target),
            "old_string": "def g():\n    return 1",
            "new_string": "def g():\n    return 3",
        },
    )
    assert not edited.result.is_error, text_of(edited)
    assert target.read_text() == "def f():\n    return 1\n\ndef g():\n    return 3\n"
    target.write_text("changed behind the model's back\n")
    stale = sandbox_daemon.execute(
        "Edit", {"file_path": str(target), "old_string": "changed", "new_string": "x"}
    )
    assert stale.result.is_error and "modified since" in text_of(stale)
    assert target.read_text() == "changed behind the model's back\n"


def test_multiedit_is_all_or_nothing(sandbox_daemon: RunningDaemon, sandbox_dir: Path) -> None:
    target = sandbox_dir / "m.txt"
    target.write_text("alpha\nbeta\ngamma\n")
    sandbox_daemon.execute("Read", {"file_path": str(target)})
    failed = sandbox_daemon.execute(
        "MultiEdit",
        {
            "file_path": str(target),
            "edits": [
                {"old_string": "alpha", "new_string": "ALPHA"},
                {"old_string": "delta", "new_string": "DELTA"},
            ],
        },
    )
    assert failed.result.is_error and "2" in text_of(failed)
    assert target.read_text() == "alpha\nbeta\ngamma\n"
    done = sandbox_daemon.execute(
        "MultiEdit",
        {
            "file_path": str(target),
            "edits": [
                {"old_string": "alpha", "new_string": "ALPHA"},
                {"old_string": "gamma", "new_string": "GAMMA"},
            ],
        },
    )
    assert not done.result.is_error, text_of(done)
    assert target.read_text() == "ALPHA\nbeta\nGAMMA\n"


def test_bash_output_exit_codes_and_no_output(
    sandbox_daemon: RunningDaemon, sandbox_dir: Path
) -> None:
    ok = sandbox_daemon.execute("Bash", {"command": "echo hi; echo err >&2"})
    assert not ok.result.is_error and text_of(ok).split() == ["hi", "err"]
    failed = sandbox_daemon.execute("Bash", {"command": "echo before; exit 3"})
    assert failed.result.is_error and text_of(failed).startswith("Exit code 3")
    assert "before" in text_of(failed) and failed.report.exit_code == 3
    quiet = sandbox_daemon.execute("Bash", {"command": "true"})
    assert not quiet.result.is_error and text_of(quiet) == "(no output)"
    made = sandbox_daemon.execute("Bash", {"command": f"echo data > {sandbox_dir}/by-bash.txt"})
    assert not made.result.is_error, text_of(made)
    created = sandbox_dir / "by-bash.txt"
    assert created.read_text() == "data\n" and created.stat().st_uid == OWNER_UID


def test_cp_copies_and_nothing_reflinks_past_the_disk_quota(
    sandbox_daemon: RunningDaemon, sandbox_dir: Path
) -> None:
    """Attacker round 152: on btrfs, copy_file_range (GNU cp's default) reflinks, and the
    extent-tree metadata of each reflink is counted by no quota group. The sandbox refuses it
    as a kernel without it would, and cp falls back to copying."""
    probe = sandbox_dir / "probe.py"
    written = sandbox_daemon.execute(
        "Write",
        {
            "file_path": str(probe),
            "content": "import os\n"
            "a = os.open('big', os.O_RDONLY)\n"
            "b = os.open('c2', os.O_CREAT | os.O_WRONLY, 0o644)\n"
            "try:\n    os.copy_file_range(a, b, 1000)\n"
            "except OSError as e:\n    print(e.errno)\n",
        },
    )
    assert not written.result.is_error, text_of(written)
    script = (
        f"cd {sandbox_dir} && head -c 300000 /dev/urandom > big && cp big copy && cmp big copy"
        " && python3 probe.py"
    )
    done = sandbox_daemon.execute("Bash", {"command": script})
    assert not done.result.is_error, text_of(done)
    assert text_of(done).strip() == "38", text_of(done)  # ENOSYS
    assert (sandbox_dir / "copy").read_bytes() == (sandbox_dir / "big").read_bytes()


def test_bash_cannot_write_outside_the_workspace_or_reach_the_network(
    sandbox_daemon: RunningDaemon,
) -> None:
    outside = sandbox_daemon.execute(
        "Bash", {"command": "touch /etc/x /usr/x /x 2>&1; echo $(id -u)"}
    )
    text = text_of(outside)
    assert "Read-only file system" in text
    assert text.strip().endswith(str(OWNER_UID))
    interfaces = sandbox_daemon.execute("Bash", {"command": "ls /sys/class/net"})
    assert text_of(interfaces).split() == ["lo"]
    routes = sandbox_daemon.execute("Bash", {"command": "tail -n +2 /proc/net/route | wc -l"})
    assert text_of(routes).strip() == "0"


def test_bash_timeout_kills_and_leaves_no_container(sandbox_daemon: RunningDaemon) -> None:
    started = time.monotonic()
    response = sandbox_daemon.execute("Bash", {"command": "sleep 1000", "timeout": 1000})
    elapsed = time.monotonic() - started
    assert response.result.is_error and response.report.timed_out
    assert "1000" in text_of(response) or "1 s" in text_of(response)
    assert elapsed < 300, "a 1 s timeout must not wait for the 1000 s sleep"
    keep = sandbox_daemon.settings.sandbox.pool_size
    assert wait_no_containers(sandbox_daemon.daemon.instance_id, keep=keep) <= keep


def test_memory_hog_is_reported_as_out_of_memory(sandbox_daemon: RunningDaemon) -> None:
    response = sandbox_daemon.execute(
        "Bash", {"command": "python3 -c 'x = bytearray(400 * 1024 * 1024); print(len(x))'"}
    )
    assert response.result.is_error
    assert response.report.oom_killed, text_of(response)
    assert "memory" in text_of(response).lower()


def test_fork_bomb_is_contained(sandbox_daemon: RunningDaemon) -> None:
    response = sandbox_daemon.execute(
        "Bash",
        {"command": "bomb() { bomb | bomb & }; bomb; sleep 2; echo survived", "timeout": 8000},
    )
    assert response.result.tool_use_id
    after = sandbox_daemon.execute("Bash", {"command": "echo still fine"})
    assert text_of(after).strip() == "still fine"


def test_client_cancel_kills_the_container(sandbox_daemon: RunningDaemon) -> None:
    tool_use = pb.ToolUse(id="toolu_cancel", name="Bash")
    tool_use.input.update({"command": "sleep 300"})
    future = sandbox_daemon.stub.Execute.future(pb.ExecuteRequest(tool_use=tool_use), timeout=120)
    time.sleep(2.0)
    future.cancel()
    with pytest.raises(grpc.FutureCancelledError):
        future.result()
    keep = sandbox_daemon.settings.sandbox.pool_size
    assert wait_no_containers(sandbox_daemon.daemon.instance_id, keep=keep) <= keep


@contextlib.contextmanager
def _own_workspace(
    short_tmp: Path, folders: tuple[str, ...] = ()
) -> Iterator[tuple[Path, RunningDaemon]]:
    """A fresh workspace owned by the sandbox user, holding `folders` and keep.txt, with a
    daemon of its own (one warm container); skips without a Docker engine."""
    workspace = Path(tempfile.mkdtemp(prefix="ws-", dir=short_tmp))
    for folder in folders:
        (workspace / folder).mkdir(parents=True)
    (workspace / "keep.txt").write_text("kept\n")
    for path in (workspace, *workspace.rglob("*")):
        os.chown(path, OWNER_UID, OWNER_GID)
    with running_daemon(
        workspace,
        workspace.with_suffix(".sock"),
        sandbox={"pool_size": 1, "ceilings": {"pids": 128}},
    ) as daemon:
        if daemon.daemon.sandbox is None or daemon.daemon.sandbox.stats() is None:
            pytest.skip("the daemon found no Docker engine")
        yield workspace, daemon


def _bash_batch(daemon: RunningDaemon, *commands: str) -> list[pb.ExecuteResponse]:
    """One ExecuteBatch of Bash calls, its answers in order."""
    uses = [pb.ToolUse(id=f"toolu_batch_{i}", name="Bash") for i in range(len(commands))]
    for use, command in zip(uses, commands, strict=True):
        use.input.update({"command": command})
    return list(daemon.stub.ExecuteBatch(pb.ExecuteBatchRequest(tool_uses=uses)))


@pytest.mark.docker
def test_a_cd_earlier_in_a_batch_moves_where_a_later_call_is_judged(short_tmp: Path) -> None:
    """Attacker round 55: from a/b, the batch [cd a, rm -rf ../../<workspace>] was judged where
    the session stood when the batch arrived (a/b, where the path is a missing subfolder) and
    allowed; it ran from a and deleted the whole workspace."""
    with _own_workspace(short_tmp, ("a/b",)) as (workspace, daemon):
        moved = daemon.execute("Bash", {"command": f"cd {workspace}/a/b"})
        assert not moved.result.is_error, text_of(moved)
        answers = _bash_batch(daemon, f"cd {workspace}/a", f"rm -rf ../../{workspace.name}")
    assert answers[0].decision.outcome == pb.ALLOW, text_of(answers[0])
    assert answers[1].decision.outcome == pb.ASK, text_of(answers[1])
    assert "recursively deletes the workspace root" in text_of(answers[1])
    assert (workspace / "keep.txt").read_text() == "kept\n"


@pytest.mark.docker
@pytest.mark.parametrize(
    "line",
    ["echo | cat | cat\nrm -rf ../../{name} && true", "rm <<EOF -rf ../../{name}\nEOF\n"],
    ids=["newline-after-a-pipeline", "words-after-a-heredoc"],
)
def test_a_command_the_grammar_runs_into_another_is_still_judged(
    short_tmp: Path, line: str
) -> None:
    """Found by hypothesis in CI, then by reading the grammar: tree-sitter-bash read the rm as
    arguments of `cat` (or dropped its arguments), so the policy never saw it and allowed the
    line, which deleted the workspace."""
    with _own_workspace(short_tmp, ("sub",)) as (workspace, daemon):
        moved = daemon.execute("Bash", {"command": f"cd {workspace}/sub"})
        assert not moved.result.is_error, text_of(moved)
        answer = daemon.execute("Bash", {"command": line.format(name=workspace.name)})
    assert answer.decision.outcome == pb.ASK, text_of(answer)
    assert "recursively deletes the workspace root" in text_of(answer)
    assert (workspace / "keep.txt").read_text() == "kept\n"


@pytest.mark.docker
@pytest.mark.parametrize("line", ["echo id | sh -s", "echo id | sh -s | cat && true"])
def test_a_shell_fed_by_a_pipe_asks_wherever_the_pipeline_ends(short_tmp: Path, line: str) -> None:
    """tree-sitter-bash reads `a | b | c && d` as `a | (b | c && d)`: the shell was the first
    stage of a pipeline of its own and the line was allowed."""
    with _own_workspace(short_tmp) as (_, daemon):
        answer = daemon.execute("Bash", {"command": line})
    assert answer.decision.outcome == pb.ASK, text_of(answer)
    assert "reads the commands it runs from a pipe" in text_of(answer)


@pytest.mark.docker
def test_code_with_other_scripts_runs_and_names_spelt_otherwise_are_read_as_spelt(
    short_tmp: Path,
) -> None:
    """Code with text outside ASCII asked a person whatever it did (round 185's rule); now the
    policy reads it as the interpreter does: `print("été")` runs, while a fullwidth `ｒemove`,
    which Python reads as `remove`, still asks, given as a word or on the input; so do escapes
    that spell a name (`\\o{162}mtree`) or that the policy cannot read (`\\LRMTREE`)."""
    fullwidth = "import os; os.\uff52emove('keep.txt')"
    rmtree = 'perl -e \'use File::Path; File::Path->can("{}")->("keep.txt")\''
    with _own_workspace(short_tmp) as (workspace, daemon):
        printed = daemon.execute(
            "Bash", {"command": "python3 -c 'print(\"\u00e9t\u00e9 \u65e5\")'"}
        )
        as_word = daemon.execute("Bash", {"command": f'python3 -c "{fullwidth}"'})
        on_input = daemon.execute("Bash", {"command": f"python3 - <<'PY'\n{fullwidth}\nPY"})
        # Attacker round 190: Perl's octal and case escapes spelt rmtree, and deleted .git.
        octal = daemon.execute("Bash", {"command": rmtree.format("\\o{162}mtree")})
        cased = daemon.execute("Bash", {"command": rmtree.format("\\LRMTREE")})
        # Round 191: a backslash Perl drops, and one bash takes from an unquoted heredoc.
        dropped = daemon.execute("Bash", {"command": rmtree.format("r\\mtree")})
        heredoc = daemon.execute(
            "Bash",
            {
                "command": "perl <<E\n"
                'use File::Path; File::Path->can("\\\\x72mtree")->("keep.txt")\nE'
            },
        )
        # Round 192: the UTF-8 bytes of `ｒ` from bash's $'\x..', and a heredoc on a group.
        as_bytes = daemon.execute(
            "Bash", {"command": "python3 -c $'import os; os.\\xef\\xbd\\x92emove(\"keep.txt\")'"}
        )
        grouped = daemon.execute(
            "Bash", {"command": "{ python3 -; } <<'PY'\nimport os; os.remove('keep.txt')\nPY"}
        )
    assert printed.decision.outcome == pb.ALLOW, text_of(printed)
    assert "\u00e9t\u00e9 \u65e5" in text_of(printed)
    for answer in (as_word, on_input, octal, dropped, heredoc, as_bytes, grouped):
        assert answer.decision.outcome == pb.ASK, text_of(answer)
        assert "code that can delete files" in text_of(answer)
    assert cased.decision.outcome == pb.ASK, text_of(cased)
    assert "escapes the policy cannot read" in text_of(cased)
    assert (workspace / "keep.txt").read_text() == "kept\n"


@pytest.mark.docker
def test_an_approval_covers_only_the_risks_the_approver_was_shown(short_tmp: Path) -> None:
    """Attacker round 57: `git push --force origin main; rm -rf d/` asked about the push only
    (here a chmod: git now makes every later path uncertain). Once approved, d was swapped for a
    link to the workspace and the call resent with the token: it was analysed again (deleting
    the workspace root now), allowed, and emptied the workspace."""
    with _own_workspace(short_tmp, ("d", "sub")) as (workspace, daemon):
        use = pb.ToolUse(id="toolu_swap", name="Bash")
        use.input.update({"command": f"chmod -R 777 {workspace}/sub; rm -rf {workspace}/d/"})
        asked = daemon.stub.Execute(pb.ExecuteRequest(tool_use=use), timeout=120)
        assert asked.decision.outcome == pb.ASK, text_of(asked)
        assert not any("workspace root" in r for r in asked.decision.reasons)
        (workspace / "d").rmdir()
        (workspace / "d").symlink_to(workspace)
        token = asked.decision.approval_token
        retried = daemon.stub.Execute(
            pb.ExecuteRequest(tool_use=use, approval_token=token), timeout=120
        )
        assert retried.decision.outcome == pb.ASK, text_of(retried)
        assert any("workspace root" in r for r in retried.decision.reasons)
        assert retried.decision.approval_token not in ("", token)
    assert (workspace / "keep.txt").read_text() == "kept\n"


@pytest.mark.docker
def test_writing_git_hooks_or_config_from_inside_dot_git_asks(short_tmp: Path) -> None:
    """Attacker round 55: redirect targets were judged as written, so `hooks/pre-commit` after
    a `cd` into .git (in the line, or by an earlier call) was written without asking."""
    workspace = short_tmp / "ws-git"
    (workspace / ".git" / "hooks").mkdir(parents=True)
    (workspace / ".git" / "config").write_text("[core]\n")
    for path in (workspace, workspace / ".git", workspace / ".git" / "hooks"):
        os.chown(path, OWNER_UID, OWNER_GID)
    os.chown(workspace / ".git" / "config", OWNER_UID, OWNER_GID)
    with running_daemon(
        workspace, short_tmp / "git.sock", sandbox={"pool_size": 1, "ceilings": {"pids": 128}}
    ) as daemon:
        if daemon.daemon.sandbox is None or daemon.daemon.sandbox.stats() is None:
            pytest.skip("the daemon found no Docker engine")
        in_line = daemon.execute(
            "Bash", {"command": f"cd {workspace}/.git && printf 'touch x' > hooks/pre-commit"}
        )
        moved = daemon.execute("Bash", {"command": f"cd {workspace}/.git"})
        later = daemon.execute("Bash", {"command": "printf '[alias]\\n' >> config"})
    assert in_line.decision.outcome == pb.ASK, text_of(in_line)
    assert f"{workspace}/.git/hooks/pre-commit" in text_of(in_line)
    assert moved.decision.outcome == pb.ALLOW, text_of(moved)
    assert later.decision.outcome == pb.ASK, text_of(later)
    assert not (workspace / ".git" / "hooks" / "pre-commit").exists()
    assert (workspace / ".git" / "config").read_text() == "[core]\n"


@pytest.mark.docker
def test_a_link_made_earlier_in_a_batch_is_seen_by_a_later_calls_judgement(
    short_tmp: Path,
) -> None:
    """Attacker round 56: [ln -sfn <workspace> L, rm -rf L/] in one batch was judged before the
    link existed; both were allowed and the workspace was emptied."""
    with _own_workspace(short_tmp) as (workspace, daemon):
        # A first command settles the session's working directory, so the batch moves nothing.
        assert not daemon.execute("Bash", {"command": "true"}).result.is_error
        answers = _bash_batch(daemon, f"ln -sfn {workspace} L", "rm -rf L/")
    assert answers[0].decision.outcome == pb.ALLOW, text_of(answers[0])
    assert answers[1].decision.outcome == pb.ASK, text_of(answers[1])
    assert "recursively deletes the workspace root" in text_of(answers[1])
    assert (workspace / "keep.txt").read_text() == "kept\n"


@pytest.mark.docker
def test_git_hooks_and_config_written_round_about_ways_ask(short_tmp: Path) -> None:
    """Attacker round 56 wrote git's hooks and config from Bash without an ASK, each way here."""
    workspace = short_tmp / "ws-git2"
    (workspace / "repo" / ".git" / "hooks").mkdir(parents=True)
    (workspace / "repo" / ".git" / "config").write_text("[core]\n")
    for folder, _, files in os.walk(workspace):
        for name in [folder, *(os.path.join(folder, f) for f in files)]:
            os.chown(name, OWNER_UID, OWNER_GID)
    lines = [
        "cd repo/.git; echo '#!/bin/sh' > .//hooks/pre-push; echo '[alias] x=!id' >> .//config",
        "ln -s repo/.git G && echo '[core] fsmonitor = touch /tmp/x' >> G/config",
        "mv repo/.git repo/g2 && echo 'echo pwned' > repo/g2/hooks/pre-commit && mv repo/g2 "
        "repo/.git",
        "ln -sfn repo/.git/hooks H",
        "cd -P H/.. && echo '#!/bin/sh' > objects/../hooks/post-merge",
    ]
    with running_daemon(
        workspace, short_tmp / "git2.sock", sandbox={"pool_size": 1, "ceilings": {"pids": 128}}
    ) as daemon:
        if daemon.daemon.sandbox is None or daemon.daemon.sandbox.stats() is None:
            pytest.skip("the daemon found no Docker engine")
        answers = [daemon.execute("Bash", {"command": line}) for line in lines]
    for line, answer in zip(lines, answers, strict=True):
        assert answer.decision.outcome == pb.ASK, (line, text_of(answer))
    assert sorted(os.listdir(workspace / "repo" / ".git" / "hooks")) == []
    assert (workspace / "repo" / ".git" / "config").read_text() == "[core]\n"


@pytest.mark.docker
def test_nothing_the_command_started_writes_after_its_answer(short_tmp: Path) -> None:
    """Attacker round 60: a process that left the command's process group (`setsid -f`) went on
    appending to a workspace file for tens of milliseconds after the call was answered (and
    after a Read of that file had returned), until the container was torn down."""
    with _own_workspace(short_tmp) as (workspace, daemon):
        writer = "while :; do echo x >> late.txt; done"
        answer = daemon.execute(
            "Bash",
            {"command": f"setsid -f bash -c '{writer}' </dev/null >/dev/null 2>&1; sleep 0.2"},
        )
        assert not answer.result.is_error, text_of(answer)
        at_answer = (workspace / "late.txt").stat().st_size
        time.sleep(0.5)
        assert at_answer > 0 and (workspace / "late.txt").stat().st_size == at_answer


@pytest.mark.docker
def test_git_files_and_the_workspace_moved_or_written_from_an_unknown_directory_ask(
    short_tmp: Path,
) -> None:
    """Attacker round 60: after `cd` and `;` (or in a subshell) the directory is unknown, and
    words there had no path and no name the policy looked at: hooks and config were copied in
    unasked; a glob named `.git` and every file of the workspace moved out of it unasked.
    Round 61: hooks from an archive or a patch, the workspace moved out through xargs, deleted
    by a list of names, emptied by truncate. Round 62: shell code in git's environment, git's
    --output onto its configuration, git's history deleted piece by piece. Round 63: a patch
    applied inside .git, names xargs hands sed, sed's `w`, every file emptied by find."""
    lines = [
        "printf '#!/bin/sh\\necho pwned\\n' > h; chmod +x h; cd .git/hooks; cp ../../h pre-commit",
        "printf '#!/bin/sh\\n' > h; chmod +x h; (cd .git/hooks; cp ../../h pre-commit)",
        "printf '[core]\\n\\tfsmonitor = id\\n' > c; (cd .git; cp ../c config)",
        "mv .gi? /tmp/",
        # Attacker round 61: names inside an archive or a patch, xargs, a list of names.
        "mkdir -p g/hooks && printf '#!/bin/sh\n' > g/hooks/pre-commit && chmod +x "
        "g/hooks/pre-commit && tar cf - g --transform s,^g,.git, | tar xf -",
        "printf -- '--- /dev/null\n+++ b/.git/hooks/post-commit\n@@ -0,0 +1 @@\n+x\n' > p.diff"
        " && patch -p1 < p.diff",
        "ls -A | xargs -I{} mv {} /tmp/",
        "ls -A > /tmp/l && tar --create --file=/dev/null --remove-files --files-from=/tmp/l",
        "find . -type f -exec truncate -s0 {} +",
        # Attacker round 62: git's environment, its --output, deletes inside .git.
        "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.fsmonitor GIT_CONFIG_VALUE_0='printf "
        '"[core]\\n\\tfsmonitor = id\\n" >> .git/config\' git status -s',
        "git log -1 --format='[core]%n%x09fsmonitor = id' --output=.git/config",
        "rm -rf .git/objects .git/refs .git/logs .git/index",
        # Attacker round 63: git inside .git, names xargs hands a writer, sed writing a file.
        "printf 'diff --git a/pre-commit b/pre-commit\\nnew file mode 100755\\n--- /dev/null\\n"
        "+++ b/pre-commit\\n@@ -0,0 +1 @@\\n+#!/bin/sh\\n' | git -C .git/hooks apply",
        "echo .git/config | xargs sed -i '$a [alias]'",
        "printf '[core]\\n\\tfsmonitor = id\\n' | sed -n 'w .git/config'",
        "find . -type f -exec sed -i d {} +",
        "mv -- * .[!.]* /tmp/",
        # Attacker round 82: inline code writing git's files without `.write` or an open mode.
        "python3 -c \"import os; fd = os.open('.gitmodules', os.O_WRONLY | os.O_CREAT, 0o644); "
        "os.pwrite(fd, b'[submodule]', 0)\"",
        "python3 -c \"import os; os.mknod('.gitattributes')\"",
        # Attacker round 83: an open whose mode is computed, git's file named in pieces.
        "python3 -c \"print('[core]', file=open('.g' + 'it/con' + 'fig', chr(97)))\"",
        'perl -E \'open F,chr(62).chr(62).".g"."it/hooks/pre-commit"; say F q(touch x)\'',
        # Attacker round 84: pathlib's open, an unpacked mode, perl's sysopen.
        "python3 -c \"import pathlib; p = '.gi' + 'tattributes'; "
        "print('*.c filter=x', file=pathlib.Path(p).open('a'))\"",
        "python3 -c \"p = '.gi' + 't/config'; print('[alias]', file=open(p, *['a']))\"",
        'perl -e \'$p=join("",".gi","tmodules"); sysopen(F,$p,1089); print F 1\'',
        # Attacker round 85: a link to a name only known when it runs, a call before the open
        # mode's comma, perl's link.
        'N=.gitattribute""s; ln -s "$N" A && echo "* filter=evil" > A',
        "python3 -c \"print('x', file=open(str('.gitmod' + 'ules'), 'w'))\"",
        "perl -e 'link q{keep.txt}, q{.gitattr}.q{ibutes}'",
        # Attacker round 86: numeric open flags and dup2, a prefix and a suffix that spell it.
        "python3 -c \"import os; n = '.gitattribute' + 's'; fd = os.open(n, 577); "
        "os.dup2(fd, 1); print('* filter=evil')\"",
        "printf '* filter=evil\\nx\\n' > in.txt && csplit -s -f .gitattribute -b '%.0ds' in.txt 2",
        # Attacker round 87: a writer given a name only known when it runs, an escaped mode.
        "X=.gitattributes; echo y | tee $X",
        "echo '* filter=evil' | tee .gitattribute{s,}",
        'python3 -c \'f = open(".gitmod" + "ules", "\\167"); print("x", file=f)\'',
        # Attacker round 88: the code option at the end of a cluster, writers and output
        # options given names only known when they run, a patch applied from a heredoc.
        "python3 -Ic \"n = '.gi' + 't'; open(n + 'attributes', 'w').write('* filter=evil')\"",
        "perl -le 'open(F, q{>}, q{.gitmodule}.q{s}) or die; print F q{[submodule \"x\"]}'",
        "sort -o .gitattribute$(echo s) keep.txt",
        "uniq keep.txt .gitmodule$(echo s)",
        "git apply <<'EOF'\ndiff --git a/.gitattributes b/.gitattributes\nnew file mode 100644\n"
        "--- /dev/null\n+++ b/.gitattributes\n@@ -0,0 +1 @@\n+* filter=evil\nEOF",
        # Attacker round 89: program text in a variable, an archive python's tarfile extracts,
        # touch and json.tool given a name only known when they run.
        "P=\"open('.gitmodules', 'w').write('[submodule]')\"; python3 -c \"$P\"",
        "printf '* filter=evil\\n' > s && tar cf t.tar s --transform 's/^s$/.gitattribute&/' "
        "&& python3 -m tarfile -e t.tar .",
        'touch "$(printf .gitattribute; echo s)"',
        "echo '{}' > in.json && python3 -m json.tool in.json .gitmodule$(echo s)",
        # Attacker round 90: an abbreviated extract option, Perl's tar.
        "mkdir -p d && printf '* filter=x\\n' > d/gitattributes && tar cf x.tar --transform "
        "'s,^g,.g,' -C d gitattributes && python3 -m tarfile --ex x.tar",
        "mkdir -p e && printf '[submodule]\\n' > e/gitmodules && tar cf y.tar --transform "
        "'s,^g,.g,' -C e gitmodules && ptar -xf y.tar",
        # Attacker round 91: logging's file handler.
        "python3 -c \"import logging; logging.basicConfig(filename='.gita' + 'ttributes', "
        "format='%(message)s'); logging.warning('* filter=x')\"",
    ]
    with _own_workspace(short_tmp, (".git/hooks",)) as (workspace, daemon):
        (workspace / ".git" / "config").write_text("[core]\n")
        os.chown(workspace / ".git" / "config", OWNER_UID, OWNER_GID)
        answers = []
        for line in lines:
            answers.append(daemon.execute("Bash", {"command": line}))
            daemon.execute("Bash", {"command": f"cd {workspace}"})
    for line, answer in zip(lines, answers, strict=True):
        assert answer.decision.outcome == pb.ASK, (line, text_of(answer))
    assert os.listdir(workspace / ".git" / "hooks") == []
    assert (workspace / ".git" / "config").read_text() == "[core]\n"
    assert (workspace / "keep.txt").read_text() == "kept\n"


@pytest.mark.docker
def test_what_a_commands_paths_lead_to_outside_the_workspace_is_not_told(
    short_tmp: Path, tmp_path: Path
) -> None:
    """Round 77's leak, through Bash: the daemon followed a command's links as root on the
    host, and the policy's reasons named where they led: what the daemon holds open, through
    /proc/self/fd (another tenant's workspace), and the target of a link in a folder the caller
    may not read. Outside the workspace a path now stays as written (the command runs in a
    container, whose files there are not the host's)."""
    secret = tmp_path / "another-tenants-workspace"
    secret.mkdir()
    hidden = tmp_path / "hidden"
    hidden.mkdir(mode=0o700)
    (hidden / "lnk").symlink_to("/very/secret/target")
    held = os.open(secret, os.O_RDONLY | os.O_DIRECTORY)  # the daemon runs in this process
    try:
        with _own_workspace(short_tmp, (".git",)) as (workspace, daemon):
            (workspace / "peek").symlink_to(hidden / "lnk")
            through_fd = daemon.execute("Bash", {"command": f"mv .git /proc/self/fd/{held}/"})
            through_link = daemon.execute("Bash", {"command": "mv .git peek/"})
    finally:
        os.close(held)
    for answer, written in ((through_fd, f"/proc/self/fd/{held}"), (through_link, str(hidden))):
        text = text_of(answer)
        assert answer.decision.outcome == pb.ASK, text
        assert written in text, text
        assert str(secret) not in text and "/very/secret" not in text, text
    assert (workspace / ".git").is_dir()


@pytest.mark.docker
def test_the_daemons_containers_run_the_runner_staged_with_its_compiled_forms(
    sandbox_daemon: RunningDaemon,
) -> None:
    """The daemon mounts the runner it staged in its state directory (sandbox/runner_stage.py),
    read-only, and calls run through it."""
    answer = sandbox_daemon.execute("Bash", {"command": "echo staged"})
    assert not answer.result.is_error and text_of(answer) == "staged\n", text_of(answer)
    sources = set()
    client = docker.from_env()
    try:
        deadline = time.monotonic() + 120  # the pool refills after the call: one shows up
        while not sources and time.monotonic() < deadline:
            for container in containers_of(sandbox_daemon.daemon.instance_id):
                with contextlib.suppress(docker.errors.NotFound):  # removed meanwhile
                    info = client.api.inspect_container(container.id)
                    sources |= {
                        (m["Source"], m["RW"])
                        for m in info["Mounts"]
                        if m["Destination"] == RUNNER_DIR
                    }
            time.sleep(0.1)
    finally:
        client.close()
    ((staged, writable),) = sources
    source = Path(staged)
    assert source.parent == sandbox_daemon.settings.state_dir / "runner" and not writable
    assert (source / "__pycache__" / f"runner.{sys.implementation.cache_tag}.pyc").is_file()
    assert (source / "runner.py").read_bytes() == RUNNER_SOURCE.read_bytes()


def _asked_and_kept(
    short_tmp: Path, setup: Callable[[Path], str], attacks: Callable[[Path], list[str]]
) -> None:
    """In a workspace of its own, `setup` runs (allowed), then each of `attacks` (lines that
    emptied the workspace unasked) is not allowed, and the workspace keeps its file."""
    with _own_workspace(short_tmp) as (workspace, daemon):
        made = daemon.execute("Bash", {"command": setup(workspace)})
        assert made.decision.outcome == pb.ALLOW and not made.result.is_error, text_of(made)
        lines = attacks(workspace)
        answers = [daemon.execute("Bash", {"command": line}) for line in lines]
    for line, answer in zip(lines, answers, strict=True):
        assert answer.decision.outcome != pb.ALLOW, (line, text_of(answer))
    assert (workspace / "keep.txt").read_text() == "kept\n"


@pytest.mark.docker
def test_a_path_back_up_through_a_link_out_of_the_workspace_does_not_hide_its_root(
    short_tmp: Path,
) -> None:
    """Attacker round 78: `l` links to /proc/self/cwd (in the container: the command's own
    directory) and `<ws>/<ws>/S` to the workspace; `rm -rf ../../../l/../../../<ws>/S/` from
    a/b/c was judged as deleting the subfolder <ws>/S (allowed) and emptied the workspace."""

    def relative(workspace: Path) -> str:
        return str(workspace).lstrip("/")

    _asked_and_kept(
        short_tmp,
        lambda ws: (
            f"mkdir -p a/b/c {relative(ws)} && ln -s /proc/self/cwd l && "
            f"ln -s {ws} {relative(ws)}/S"
        ),
        lambda ws: [f"cd a/b/c && rm -rf ../../../l/../../../{relative(ws)}/S/"],
    )


@pytest.mark.docker
def test_a_cd_that_bash_takes_through_a_link_does_not_hide_the_workspace_root(
    short_tmp: Path,
) -> None:
    """Attacker round 80: `cd <ws>/sub/L/../deep` (L -> ../a/x) was judged to land in
    <ws>/sub/deep, which does not exist, so bash went to <ws>/a/deep through the link, where
    `S` linked to the workspace: `rm -rf S/` emptied it while the policy allowed it."""
    _asked_and_kept(
        short_tmp,
        lambda ws: f"mkdir -p sub a/x a/deep && ln -s ../a/x sub/L && ln -s {ws} a/deep/S",
        lambda ws: [f"cd {ws}/sub/L/../deep && rm -rf S/"],
    )


@pytest.mark.docker
def test_lines_whose_cd_or_links_bash_takes_otherwise_do_not_hide_the_workspace_root(
    short_tmp: Path,
) -> None:
    """Attacker rounds 81 and 82, ways the facts put a command elsewhere than bash did, each
    of which emptied the workspace while the policy allowed it: a `cd` after `||` (it never
    ran), CDPATH set by `printf -v` under a quoted name, a link turned into a folder by
    `rm L && mkdir L` before `L/..` was used, a negated `cd`, a function named `cd`."""
    _asked_and_kept(
        short_tmp,
        lambda ws: "mkdir -p q a/b/c/d && ln -s q L && ln -s c/d a/b/L && ln -s a/b/c M",
        lambda ws: [
            "true || cd a/b && find L/.. -delete",
            f"printf -v CD''PATH {ws.parent} && cd {ws.name} && find . -delete",
            "rm M && mkdir M && find M/.. -delete",
            # Round 82: a negated cd, a function named cd.
            f"! cd nope && find ../{ws.name} -delete",
            f"cd() {{ :; }}; cd q && find ../{ws.name} -delete",
        ],
    )


@pytest.mark.docker
def test_programs_named_like_the_builtins_do_not_hide_the_workspace_root(short_tmp: Path) -> None:
    """Attacker round 83: `./cd a/b && rm -rf ../<ws>` was judged from a/b (the builtin cd's
    place), and `./echo && rm -rf L/<ws>` as if echo made no link (this one made L -> ..):
    both emptied the workspace while the policy allowed them."""
    _asked_and_kept(
        short_tmp,
        lambda ws: (
            "mkdir -p a/b && cp /bin/true cd && printf '#!/bin/sh\\nln -s .. L\\n' > echo && "
            "chmod +x cd echo"
        ),
        lambda ws: [f"./cd a/b && rm -rf ../{ws.name}", f"./echo && rm -rf L/{ws.name}"],
    )


@pytest.mark.docker
def test_links_made_where_or_by_what_the_line_order_hides_do_not_hide_the_workspace_root(
    short_tmp: Path,
) -> None:
    """Attacker round 84: the link L -> .. made by a command written after the rm, which runs
    later (a function, a loop), or by a reader of the model's (`./find`, a `cat` found through
    the PATH the line sets): each emptied the workspace while the policy allowed it."""
    _asked_and_kept(
        short_tmp,
        lambda ws: (
            "printf '#!/bin/sh\\nln -sfn .. L\\n' > find && cp find cat && chmod 755 find cat"
        ),
        lambda ws: [
            f"f() {{ rm -rf L/{ws.name}; }}; ln -s .. L && f",
            f"for i in 1 2; do test $i = 2 && rm -rf L/{ws.name}; ln -sfn .. L; done",
            f"./find . -name x && rm -rf L/{ws.name}",
            f"export PATH=.:$PATH && cat find && rm -rf L/{ws.name}",
            # Round 85: a substitution of the rm's runs before it; a job detached without `&`.
            f'rm -rf L/{ws.name} 2>"$(ln -s .. L)log"',
            f"setsid -f sh -c 'sleep 0.5; rm -rf L/{ws.name}'; ln -s .. L; sleep 2",
            # Round 86: a background job whose `&` only exists once eval decoded it.
            f"eval $'sleep 0.5 \\x26\\x26 rm -rf L/{ws.name} \\x26'; ln -s .. L; sleep 2",
            # Round 87: files deleted one by one under names only known when it runs.
            "shopt -s globstar dotglob; rm -f -- ** 2>/dev/null; rmdir -- ** 2>/dev/null; ls",
            # Round 88: a code option at the end of a cluster, programs read from a heredoc or
            # here-string, a shell given -s with operands or /dev/stdin, files emptied by a
            # writer given names only known when it runs.
            'python3 -Ic "import shutil, os; [shutil.rmtree(p) if os.path.isdir(p) else '
            "os.remove(p) for p in os.listdir('.')]\"",
            "python3 <<'EOF'\nimport os\nos.remove('keep.txt')\nEOF",
            "perl <<< 'unlink q{keep.txt}'",
            "printf 'import os\\nos.remove(\"keep.txt\")\\n' | python3",
            "bash -s x <<< 'rm -rf * .[!.]*'",
            "bash /dev/stdin <<'EOF'\nrm -rf *\nEOF",
            "bash -c bash <<< 'rm -rf *'",
            "ln -s /dev/stdin s; bash s <<< 'rm -rf *'",
            'shopt -s globstar dotglob; for f in **; do [ -f "$f" ] && sort -o "$f" /dev/null; '
            "done; true",
            # Round 89: program text in a variable, perl's and fileinput's in-place editing,
            # compression in place.
            'C=\'import os; [os.remove(f) for f in os.listdir() if f[0] != "."]\'; python3 -c "$C"',
            "C='import os; [os.remove(f) for f in os.listdir() if f[0] != \".\"]'; "
            'python3 <<< "$C"',
            'C=\'unlink $_ for glob "*"\'; perl -e "$C"',
            'perl -pe \'BEGIN{$^I=""} $_=""\' *',
            'python3 -c "import fileinput\nfor l in fileinput.input(inplace=True): pass" *',
            "gzip -r . 2>/dev/null; ls -A",
            # A program bash runs from a script on its input reads the rest as its own program.
            "bash <<'E'\nperl\nunlink q{keep.txt}\nE",
            # Round 90: os.open's flags in parentheses, gawk's in-place extension, timeit's
            # statements, code in perl's -M, commands tar runs.
            "python3 -c \"import os, glob; [os.open(p, (513)) for p in glob.glob('**', "
            'recursive=True) if os.path.isfile(p)]"',
            "gawk '@include \"inplace\"; {}' *",
            "python3 -m timeit -n1 -r1 -s 'import os, glob' "
            "'[os.unlink(p) for p in glob.glob(\"*\")]'",
            "perl '-Mstrict;unlink glob q(*)' -e1",
            "tar cf /dev/null --checkpoint=1 --checkpoint-action=exec='rm -rf *' .",
            "tar -c -I 'sh -c \"rm -rf ./*\"' -f /dev/null keep.txt",
            # Round 91: a virtual environment cleared over the workspace, ExtUtils::Command.
            "python3 -m venv --without-pip --clear .",
            f"cd / && perl -MExtUtils::Command -e rm_rf -- {ws}",
        ],
    )


def test_a_calls_container_goes_and_the_pool_refills_once_the_rpc_has_answered(
    short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The used container's removal and the warm pool's refill wait until the call's answer is
    sent (sandbox/after_answer.py); the end of the RPC releases them, unary or streamed, and
    a batch's calls are not held at all. The fallback timer is pushed out of reach, so only
    those releases can pass this test."""
    monkeypatch.setattr(after_answer, "RELEASE_AFTER_S", 3600.0)
    with _own_workspace(short_tmp) as (_, daemon):
        sandbox = daemon.daemon.sandbox
        assert sandbox is not None

        def stats() -> ExecutorStats:
            now = sandbox.stats()
            assert now is not None
            return now

        def wait_for(condition: Callable[[], bool], what: str) -> None:
            deadline = time.monotonic() + 120
            while not condition():
                assert time.monotonic() < deadline, f"still waiting: {what} ({stats()})"
                time.sleep(0.05)

        def unary() -> list[str]:
            answer = daemon.execute("Bash", {"command": "echo hi"})
            return [answer.report.sandbox_id] if text_of(answer).strip() == "hi" else []

        def streamed() -> list[str]:
            use = pb.ToolUse(id="toolu_streamed", name="Bash")
            use.input.update({"command": "echo hi"})
            events = list(daemon.stub.ExecuteStream(pb.ExecuteRequest(tool_use=use), timeout=120))
            answers = [e.response for e in events if e.HasField("response")]
            return [a.report.sandbox_id for a in answers if text_of(a).strip() == "hi"]

        def batch() -> list[str]:
            answers = _bash_batch(daemon, "echo hi", "echo hi", "echo hi")
            return [a.report.sandbox_id for a in answers if text_of(a).strip() == "hi"]

        for send, calls in ((unary, 1), (streamed, 1), (batch, 3)):
            wait_for(lambda: stats().pooled == 1, "a warm container")
            goal = stats().removed + calls
            used = send()
            assert len(used) == calls, f"{send.__name__}: {used}"
            wait_for(
                lambda goal=goal: stats().removed >= goal and stats().pooled == 1,
                f"{send.__name__}: its containers removed and the pool refilled",
            )
            left = {c.id for c in containers_of(daemon.daemon.instance_id)}
            assert not any(c.startswith(u) or u.startswith(c) for c in left for u in used)
