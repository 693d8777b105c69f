"""The ASK round trip end to end: nothing runs, a token comes back, the approved retry runs once;
forged, mismatched and replayed tokens are denied with a reason. Inputs are masked in audit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from tests.integration.harness import RunningDaemon, text_of

pytestmark = [pytest.mark.integration, pytest.mark.docker]


def bash(command: str, tool_use_id: str) -> pb.ToolUse:
    use = pb.ToolUse(id=tool_use_id, name="Bash")
    use.input.update({"command": command})
    return use


def test_ask_then_approved_retry_runs_once(
    sandbox_daemon: RunningDaemon, sandbox_dir: Path
) -> None:
    marker = sandbox_dir / "ran.txt"
    command = f"echo ran >> {marker}; git push --force origin main"
    use = bash(command, "toolu_ask_1")
    asked = sandbox_daemon.stub.Execute(pb.ExecuteRequest(tool_use=use), timeout=120)
    assert asked.decision.outcome == pb.ASK
    assert asked.result.is_error and "approval" in text_of(asked)
    assert asked.decision.approval_token.startswith("tja1.")
    assert any("push" in r for r in asked.decision.reasons)
    assert not marker.exists(), "nothing may run before approval"

    token = asked.decision.approval_token
    approved = sandbox_daemon.stub.Execute(
        pb.ExecuteRequest(tool_use=use, approval_token=token), timeout=120
    )
    assert approved.decision.outcome == pb.ALLOW, text_of(approved)
    assert marker.read_text() == "ran\n"
    assert approved.report.sandboxed

    replayed = sandbox_daemon.stub.Execute(
        pb.ExecuteRequest(tool_use=use, approval_token=token), timeout=120
    )
    assert replayed.report.replayed and marker.read_text() == "ran\n"

    again = sandbox_daemon.stub.Execute(
        pb.ExecuteRequest(tool_use=bash(command, "toolu_ask_2"), approval_token=token),
        timeout=120,
    )
    assert again.decision.outcome == pb.DENY
    assert "approval token was refused" in text_of(again)
    assert marker.read_text() == "ran\n"


def test_forged_and_mismatched_tokens_are_denied(
    sandbox_daemon: RunningDaemon, sandbox_dir: Path
) -> None:
    use = bash("git push --force origin main", "toolu_ask_3")
    asked = sandbox_daemon.stub.Execute(pb.ExecuteRequest(tool_use=use), timeout=120)
    token = asked.decision.approval_token
    assert token

    payload, mac = token.rsplit(".", 1)
    forged = payload + "." + ("A" if mac[0] != "A" else "B") + mac[1:]
    denied = sandbox_daemon.stub.Execute(
        pb.ExecuteRequest(tool_use=use, approval_token=forged), timeout=120
    )
    assert denied.decision.outcome == pb.DENY and "approval token was refused" in text_of(denied)

    other_input = bash("git push --force origin other", "toolu_ask_3b")
    mismatched = sandbox_daemon.stub.Execute(
        pb.ExecuteRequest(tool_use=other_input, approval_token=token), timeout=120
    )
    assert mismatched.decision.outcome == pb.DENY
    assert "approval token was refused" in text_of(mismatched)

    garbage = sandbox_daemon.stub.Execute(
        pb.ExecuteRequest(tool_use=bash("ls", "toolu_ask_4"), approval_token="not-a-token"),
        timeout=120,
    )
    assert garbage.decision.outcome == pb.DENY


def test_privilege_tools_are_denied_even_when_hidden(sandbox_daemon: RunningDaemon) -> None:
    for i, command in enumerate(
        ["sudo id", "bash -c 'sudo id'", "echo $(sudo id)", "timeout 5 /usr/bin/sudo ls"]
    ):
        answer = sandbox_daemon.stub.Execute(
            pb.ExecuteRequest(tool_use=bash(command, f"toolu_priv_{i}")), timeout=120
        )
        assert answer.decision.outcome == pb.DENY, command
        assert "sudo" in text_of(answer)


def test_audit_masks_what_the_policy_says(sandbox_daemon: RunningDaemon, sandbox_dir: Path) -> None:
    target = sandbox_dir / "secret.txt"
    use = pb.ToolUse(id="toolu_masked", name="Write")
    use.input.update({"file_path": str(target), "content": "hunter2-password"})
    sandbox_daemon.stub.Execute(pb.ExecuteRequest(tool_use=use), timeout=120)
    record = next(r for r in sandbox_daemon.audit_lines() if r["tool_use_id"] == "toolu_masked")
    assert record["input"]["file_path"] == str(target)
    assert record["input"]["content"] == "***masked***"
    assert "hunter2" not in sandbox_daemon.audit_path.read_text()


def test_a_notebook_cells_source_is_masked_too(
    sandbox_daemon: RunningDaemon, sandbox_dir: Path
) -> None:
    """Attacker round 144: NotebookEdit's new_source reached the audit in clear, and a long one
    spent the input's scan budget before the notebook's path (the keys go sorted)."""
    notebook = sandbox_dir / "n.ipynb"
    notebook.write_text(
        '{"cells": [{"cell_type": "code", "id": "c1", "metadata": {}, "source": [], '
        '"outputs": [], "execution_count": null}], "metadata": {}, "nbformat": 4, '
        '"nbformat_minor": 5}'
    )
    use = pb.ToolUse(id="toolu_notebook_masked", name="NotebookEdit")
    source = "API = 'hunter3-secret'\n" + "#" * 8200
    use.input.update({"notebook_path": str(notebook), "cell_id": "c1", "new_source": source})
    sandbox_daemon.stub.Execute(pb.ExecuteRequest(tool_use=use), timeout=120)
    record = next(
        r for r in sandbox_daemon.audit_lines() if r["tool_use_id"] == "toolu_notebook_masked"
    )
    assert record["input"]["new_source"] == "***masked***"
    assert record["input"]["notebook_path"] == str(notebook)
    assert "hunter3" not in sandbox_daemon.audit_path.read_text()


def test_secrets_in_bash_commands_are_masked_in_the_audit(sandbox_daemon: RunningDaemon) -> None:
    token = "ghp_" + "Zy9Xw8Vu" * 4
    command = f"export GITHUB_TOKEN={token} && echo exported"
    answer = sandbox_daemon.stub.Execute(
        pb.ExecuteRequest(tool_use=bash(command, "toolu_secret_cmd")), timeout=120
    )
    assert text_of(answer).strip() == "exported", text_of(answer)
    records = [
        r for r in sandbox_daemon.audit_lines(None) if r["tool_use_id"] == "toolu_secret_cmd"
    ]
    assert {r["event"] for r in records} == {"decided", "answered"}
    for record in records:
        assert token not in str(record)
        assert record["input"]["command"] == "export GITHUB_TOKEN=***masked*** && echo exported"


def _commands_audited(daemon: RunningDaemon, tool_use_id: str) -> list[str]:
    return [
        r["input"].get("command", "")
        for r in daemon.audit_lines(None)
        if r["tool_use_id"] == tool_use_id
    ]


@pytest.mark.parametrize(
    ("tool", "extra"), [("Bash", {"timeout": -5}), ("Bsh", {}), ("ghp_" + "Qw7Er6Ty" * 4, {})]
)
def test_a_rejected_calls_long_command_is_masked_in_the_audit(
    sandbox_daemon: RunningDaemon, tool: str, extra: dict[str, Any]
) -> None:
    """Attacker round 154: a long command sent with a bad input, or to a misspelt tool, was
    logged whole, the token in clear; round 158: so was a tool name holding one."""
    token = "ghp_" + "Qw7Er6Ty" * 4
    command = f"curl -s -H 'Authorization: Bearer {token}' https://api.example/user # " + "x" * 300
    tool_use_id = f"toolu_rejected_{len(tool)}_{len(extra)}"
    use = pb.ToolUse(id=tool_use_id, name=tool)
    use.input.update({"command": command, **extra})
    answer = sandbox_daemon.stub.Execute(pb.ExecuteRequest(tool_use=use), timeout=120)
    assert answer.result.is_error
    (command_logged,) = _commands_audited(sandbox_daemon, tool_use_id)
    assert token not in command_logged and "***masked***" in command_logged
    assert token not in sandbox_daemon.audit_path.read_text()


def test_a_masked_value_never_hides_what_a_command_runs(
    sandbox_daemon: RunningDaemon, sandbox_dir: Path
) -> None:
    """Attacker round 148: `sed -u s:x:rm:e job.txt` ran rm through sed's `e` flag and was
    audited as `sed -u s:***masked*** job.txt` (a user:password after `-u` was masked for any
    program); `A_TOKEN=-delete; find ... $A_TOKEN` deleted files behind a masked assignment.
    Both are logged as they ran."""
    (sandbox_dir / "job.txt").write_text("x ran-through-sed\n")
    for tool_use_id, command in [
        # Since round 151 the policy asks for sed's `e` flag however delimited: `sort -u`
        # shows the same masking (a user:password after -u for a program that is not curl).
        ("toolu_sed_u", f"cd {sandbox_dir} && sort -u x:hunter22 job.txt 2>/dev/null; echo"),
        ("toolu_find_var", f'A_TOKEN=-print; find {sandbox_dir} -name "job*" $A_TOKEN'),
    ]:
        answer = sandbox_daemon.stub.Execute(
            pb.ExecuteRequest(tool_use=bash(command, tool_use_id)), timeout=120
        )
        assert answer.decision.outcome == pb.ALLOW, answer.decision
        assert _commands_audited(sandbox_daemon, tool_use_id) == [command, command]
    assert "job.txt" in text_of(answer)


def test_a_long_description_or_pipeline_hides_no_command(sandbox_daemon: RunningDaemon) -> None:
    """Attacker round 148: a description of 8,192 characters sent first spent the audit's scan
    budget, and the command was logged as "[1 more keys not logged]"; a 32 KB pipeline after a
    masked assignment was parsed twice on the event loop (15 s). Both commands are logged
    whole, and the daemon answers."""
    use = pb.ToolUse(id="toolu_long_description", name="Bash")
    use.input.update({"description": "a" * 8192, "command": "echo ran-after-a-description"})
    answer = sandbox_daemon.stub.Execute(pb.ExecuteRequest(tool_use=use), timeout=120)
    assert text_of(answer).strip() == "ran-after-a-description", text_of(answer)
    audited = _commands_audited(sandbox_daemon, "toolu_long_description")
    assert audited == ["echo ran-after-a-description"] * 2, audited
    pipeline = "A_TOKEN=x; " + "a|" * 16000 + "a"
    answer = sandbox_daemon.stub.Execute(
        pb.ExecuteRequest(tool_use=bash(pipeline, "toolu_long_pipeline")), timeout=300
    )
    assert answer.result.tool_use_id == "toolu_long_pipeline"
    assert set(_commands_audited(sandbox_daemon, "toolu_long_pipeline")) == {pipeline}


def test_a_path_past_path_max_is_refused(sandbox_daemon: RunningDaemon, sandbox_dir: Path) -> None:
    """Attacker round 148: a Write to `<ws>` + `/.` * 5000 + `/hidden-target.sh` was made, and
    the audit kept 1,024 characters of its path."""
    path = str(sandbox_dir) + "/." * 5000 + "/hidden-target.sh"
    use = pb.ToolUse(id="toolu_long_path", name="Write")
    use.input.update({"file_path": path, "content": "echo hidden\n"})
    answer = sandbox_daemon.stub.Execute(pb.ExecuteRequest(tool_use=use), timeout=120)
    assert answer.result.is_error and "at most 4096 characters" in text_of(answer)
    assert not (sandbox_dir / "hidden-target.sh").exists()


@pytest.mark.parametrize(
    "wrapper", ["", "prlimit --nofile=64 ", "flock /tmp/lk ", "setarch x86_64 "]
)
def test_a_wrapper_the_policy_did_not_know_still_shows_what_it_runs(
    sandbox_daemon: RunningDaemon, wrapper: str
) -> None:
    """Attacker round 149: `setarch x86_64 mount ...` was allowed where `mount` is denied, and
    `prlimit --nofile=64 rm -rf <ws>/*` ran where `rm -rf <ws>/*` asks: the policy judged the
    wrapper. Each is judged as what it runs."""
    workspace = sandbox_daemon.workspace.resolve()
    mount = sandbox_daemon.stub.Execute(
        pb.ExecuteRequest(tool_use=bash(f"{wrapper}mount -t tmpfs x /mnt", "toolu_w_mount")),
        timeout=120,
    )
    assert mount.decision.outcome == pb.DENY, (wrapper, mount.decision)
    wipe = sandbox_daemon.stub.Execute(
        pb.ExecuteRequest(tool_use=bash(f"{wrapper}rm -rf {workspace}/*", "toolu_w_rm")),
        timeout=120,
    )
    assert wipe.decision.outcome == pb.ASK, (wrapper, wipe.decision)


def test_a_secret_option_of_a_program_that_is_no_client_is_not_masked(
    sandbox_daemon: RunningDaemon, sandbox_dir: Path
) -> None:
    """Attacker round 149: `rm -rf -- --token keep` was audited as `rm -rf -- --token
    ***masked***`: the value of a secret option was masked for any program."""
    (sandbox_dir / "keep").mkdir()
    command = f"cd {sandbox_dir} && rm -rf -- --token keep"
    answer = sandbox_daemon.stub.Execute(
        pb.ExecuteRequest(tool_use=bash(command, "toolu_token_rm")), timeout=120
    )
    assert answer.decision.outcome == pb.ALLOW, answer.decision
    assert not (sandbox_dir / "keep").exists()
    assert _commands_audited(sandbox_daemon, "toolu_token_rm") == [command, command]


ROUND_150_LAUNCHERS = [
    "/lib64/ld-linux-x86-64.so.2 /bin/rm -rf {ws}/*",
    "rbash -c 'rm -rf {ws}/*'",
    "start-stop-daemon -S -x /bin/rm -- -rf {ws}/*",
    "prlimit -o description rm -rf {ws}/*",
    "setarch --uname-2.6 rm -rf {ws}/*",
    "env -S'\\c' rm -rf {ws}/*",
    "script -qc'rm -rf {ws}/*' /dev/null",
    "TERM=dumb timeout 5 watch -g -n1 -d rm -rf {ws}/*",
    "mapfile -t -c 1 -C 'rm -rf {ws}/*;:' A <<< x",
    "git ls-remote --upload-pack='rm -rf {ws}/* #' .",
    "perl5.36.0 -e 'system(q{{rm -rf {ws}/*}})'",
    "x=$(printf 'a\\x5b\\x24\\x28rm -rf {ws}/*\\x29]'); echo ${{!x}}",
    # Round 151.
    "logsave /dev/null rm -rf {ws}/*",
    "printf 'a\\n' | sed '1!e rm -rf {ws}/*'",
    'gawk \'BEGIN{{f="sys" "tem"; @f("rm -rf {ws}/*")}}\'',
    'python3 -c \'import os,operator; operator.attrgetter("sys"+"tem")(os)("ls {ws}")\'',
    "PERL5OPT=-Mstrict perl -e 1",
]


ROUND_155_156_LINES = [
    # Round 155: split's filter, sed and awk programs only known when they run.
    "echo a > f155; split --filter='rm -rf {ws}/*' f155 out_",
    "S='1e rm -rf {ws}/*'; echo x | sed \"$S\"",
    'P=\'BEGIN{{system("rm -rf {ws}/*")}}\'; awk "$P"',
    # Round 156: a pager named after twenty harmless ones, set without `NAME=`, spelt with
    # quotes, or decoded from ANSI-C quoting.
    " ".join(["PAGER=cat"] * 20) + " PAGER='rm -rf {ws}/*' script -qec 'pydoc3 sys' /dev/null",
    "read PAGER <<< 'rm -rf {ws}/*'; script -qec 'pydoc3 sys' /dev/null",
    "export MANPA\"\"GER='rm -rf {ws}/*'; script -qec 'pydoc3 sys' /dev/null",
    "export $'\\x50'AGER='rm -rf {ws}/*'; script -qec 'pydoc3 sys' /dev/null",
    # Round 157: a nameref to a name built when it runs, an exported function, sort's compress
    # program, sed's letter delimiters, gawk's `@ f()`, a `}` in an awk string.
    "n=PERL5OP; declare -n r=${{n}}T; export r='-Mstrict;system(q(rm -rf {ws}/*))'; perl -e 1",
    "env 'BASH_FUNC_ls%%=() {{ touch p157f; }}' bash -c ls",
    "{{ echo 'rm -rf {ws}/*'; yes : | head -n 40000; }} | sort -S 64K --compress-program=sh",
    "echo x | sed '\\a^ae touch p157s'",
    'gawk \'BEGIN{{f="sys" "tem"; @ f("rm -rf {ws}/*")}}\'',
    'awk \'BEGIN{{print "}}" > "{ws}/p157"}}\'',
    # Round 159: sed's e after flags and another delimiter, gawk's `@\\` and a newline, a `;`
    # in an awk regular expression, printf -vNAME, variables python and git read code from,
    # tar feeding its archive to a shell.
    "echo x | sed 's,x,touch p159a,ge'",
    'gawk \'BEGIN {{ f = "sys" "tem"; @\\\n f("touch p159b") }}\'',
    'gawk \'BEGIN {{ print (1 ~ /;/), "x" > "p159c" }}\'',
    "printf -vPAGER 'touch p159d;cat'; script -qc 'pydoc3 len' /dev/null",
    "set -a; printf -vPERL5OPT '%s' '-Mstrict;system(q(touch),q(p159e))'; perl -e 1",
    "PYTHONUSERBASE=$PWD/u python3 -c 'print(1)'",
    "HOME=$PWD/.. git status --short",
    "printf '\\ntouch p159f\\n' > p.txt && tar -cf o.tar -I bash p.txt",
    # Round 161: sed spellings rules looking for e and w missed (sed programs are now read for
    # what they may do), a `/;/` right after print, a shell given /dev/stdin by tar, tar's and
    # flock's environment.
    "echo a > in.txt; sed 's-.*-touch p161a-eg' in.txt",
    "echo a > in.txt; sed 's-a-b-wp161b' in.txt",
    "echo a > in.txt; sed '/./Isa.*atouch p161cae' in.txt",
    "awk 'BEGIN{{print /;/ > \"p161d\"}}'",
    "printf '\\ntouch p161e\\n' > q.txt; tar -cf o3.tar -I 'bash /dev/stdin' q.txt",
    "TAR_OPTIONS='--checkpoint=1 --checkpoint-action=exec=touch' tar -tf o3.tar",
    "SHELL=/usr/bin/gawk flock f.lock -c 'BEGIN{{print|\"touch p161f\"}}'",
]


@pytest.mark.parametrize("index", range(len(ROUND_155_156_LINES)))
def test_a_program_run_from_a_string_or_variable_the_policy_cannot_read_is_asked_about(
    sandbox_daemon: RunningDaemon, index: int
) -> None:
    """Attacker rounds 155 to 161: each of these ran `rm -rf` (or `id`, or wrote a file)
    unasked."""
    command = ROUND_155_156_LINES[index].format(ws=sandbox_daemon.workspace.resolve())
    answer = sandbox_daemon.stub.Execute(
        pb.ExecuteRequest(tool_use=bash(command, f"toolu_round_155_156_{index}")), timeout=120
    )
    assert answer.decision.outcome == pb.ASK, (command, answer.decision)


@pytest.mark.parametrize("line", ROUND_150_LAUNCHERS)
def test_a_launcher_the_policy_did_not_read_is_asked_about(
    sandbox_daemon: RunningDaemon, line: str
) -> None:
    """Attacker round 150: each of these emptied the workspace unasked (the loader, rbash and
    start-stop-daemon running their operand, options misread, env -S escapes, script's
    attached string, watch -d, mapfile's callback, git's --upload-pack, a versioned perl, an
    indirect expansion); `rm -rf <ws>/*` itself asks."""
    command = line.format(ws=sandbox_daemon.workspace.resolve())
    answer = sandbox_daemon.stub.Execute(
        pb.ExecuteRequest(tool_use=bash(command, "toolu_launcher")), timeout=120
    )
    assert answer.decision.outcome == pb.ASK, (command, answer.decision)


@pytest.mark.parametrize(
    ("command", "outcome"),
    [("PAGER=cat git --version", pb.ALLOW), ("PAGER='cat;id' git --version", pb.ASK)],
)
def test_a_pager_that_is_cat_runs_unasked_and_any_other_is_asked_about(
    sandbox_daemon: RunningDaemon, command: str, outcome: int
) -> None:
    answer = sandbox_daemon.stub.Execute(
        pb.ExecuteRequest(tool_use=bash(command, f"toolu_pager_{outcome}")), timeout=120
    )
    assert answer.decision.outcome == outcome, (command, answer.decision)
    if outcome == pb.ALLOW:
        assert not answer.result.is_error and "git version" in answer.result.content[0].text.text


def test_a_masked_assignment_given_to_git_is_logged_whole(sandbox_daemon: RunningDaemon) -> None:
    """Attacker round 150: git runs --upload-pack through sh with its environment, and the
    command read the masked value with `printenv | sed -n s/^MY_TOK[E]N=//p`: the audit said
    `MY_TOKEN=***masked***` where `rm -rf` was. Only an HTTP client is given a masked
    assignment."""
    command = "MY_TOKEN=echo+hi git --version"
    answer = sandbox_daemon.stub.Execute(
        pb.ExecuteRequest(tool_use=bash(command, "toolu_git_token")), timeout=120
    )
    assert answer.decision.outcome == pb.ALLOW, answer.decision
    assert set(_commands_audited(sandbox_daemon, "toolu_git_token")) == {command}
