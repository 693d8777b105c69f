"""The hooks engine against real hook processes (small scripts written to tmp_path)."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
import textwrap
import time
import tomllib
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from daemon.hooks import (
    HookCall,
    HookEngine,
    HookEvent,
    HookList,
    HookSpec,
)
from daemon.hooks.protocol import MAX_TEXT_CHARS
from daemon.hooks.runner import OUTPUT_CAP_BYTES
from daemon.models import Outcome, TextContent

PRE = HookEvent.PRE_TOOL_USE
POST = HookEvent.POST_TOOL_USE
FAILURE = HookEvent.POST_TOOL_USE_FAILURE


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "workspace"
    path.mkdir()
    return path.resolve()


def bash_call(ws: Path, command: str, **extra: Any) -> HookCall:
    return HookCall(
        session_id="sess-1",
        workspace=ws,
        tool_name="Bash",
        tool_input={"command": command, **extra},
        tool_use_id="toolu_01",
    )


def script(tmp_path: Path, name: str, body: str, *, python: bool = False) -> Path:
    """An executable hook script; Python ones run with this interpreter."""
    shebang = f"#!{sys.executable}" if python else "#!/bin/sh"
    path = tmp_path / name
    path.write_text(shebang + "\n" + textwrap.dedent(body).lstrip())
    path.chmod(0o755)
    return path


def hook(event: HookEvent, command: str | list[str] | Path, **fields: Any) -> HookSpec:
    if isinstance(command, Path):
        command = f"'{command}'"
    return HookSpec.model_validate({"event": event, "command": command, **fields})


def json_hook(tmp_path: Path, filename: str, answer: dict[str, Any], **fields: Any) -> HookSpec:
    """A hook that reads its input and prints `answer` as JSON."""
    body = f"""
        import json, sys
        json.load(sys.stdin)
        print(json.dumps({answer!r}))
    """
    return hook(fields.pop("event", PRE), script(tmp_path, filename, body, python=True), **fields)


def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (state, ppid, pgrp, ...)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None


def alive(pid: int) -> bool:
    """The process exists and is not a zombie waiting for a reaper."""
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


def group_alive(pgid: int) -> bool:
    """Some process of the group is still alive (zombies do not count)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields is not None and fields[2] == str(pgid) and fields[0] != "Z":
                return True
    return False


def running_with(token: str) -> bool:
    """A live process has `token` in its command line."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if token.encode() in cmdline and alive(int(entry.name)):
            return True
    return False


async def gone(still_there: Callable[[], bool], within_s: float = 2.0) -> bool:
    """SIGKILL is delivered asynchronously: allow the processes a moment to finish dying."""
    deadline = time.monotonic() + within_s
    while still_there():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


# --- PreToolUse: block, rewrite, decide ------------------------------------------------------

BLOCK_PUSH = """
    input=$(cat)
    printf '%s' "$input" > "$CLAUDE_PROJECT_DIR/seen.json"
    env > "$CLAUDE_PROJECT_DIR/env.txt"
    pwd > "$CLAUDE_PROJECT_DIR/cwd.txt"
    if printf '%s' "$input" | grep -q '"command": *"git push'; then
      echo "Pushing is not allowed from agent sessions; open a pull request instead." >&2
      exit 2
    fi
    exit 0
"""


async def test_exit_2_blocks_git_push_with_stderr_as_reason(tmp_path: Path, ws: Path) -> None:
    engine = HookEngine([hook(PRE, script(tmp_path, "block-push.sh", BLOCK_PUSH), matcher="Bash")])

    outcome = await engine.pre_tool_use(bash_call(ws, "git push origin main"))

    assert outcome.decision is Outcome.DENY
    assert outcome.reasons == (
        "Hook 'block-push.sh': Pushing is not allowed from agent sessions; open a pull request "
        "instead.",
    )
    assert outcome.updated_input is None
    assert outcome.to_policy() == [
        {
            "name": "block-push.sh",
            "decision": "deny",
            "reason": "Pushing is not allowed from agent sessions; open a pull request instead.",
        }
    ]
    [result] = outcome.results
    assert (result.status, result.exit_code) == ("blocked", 2)

    allowed = await engine.pre_tool_use(bash_call(ws, "git status"))
    assert allowed.decision is None
    assert allowed.to_policy() == [{"name": "block-push.sh", "decision": "none", "reason": ""}]


async def test_hook_gets_claude_code_input_clean_env_and_a_neutral_cwd(
    tmp_path: Path, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLJAIL_SECRET_TOKEN", "must-not-leak")
    engine = HookEngine([hook(PRE, script(tmp_path, "block-push.sh", BLOCK_PUSH))])
    call = HookCall(
        session_id="sess-1",
        workspace=ws,
        tool_name="Bash",
        tool_input={"command": "ls", "timeout": 1000},
        tool_use_id="toolu_42",
        permission_mode="acceptEdits",
    )

    await engine.pre_tool_use(call)

    assert json.loads((ws / "seen.json").read_text()) == {
        "hook_event_name": "PreToolUse",
        "session_id": "sess-1",
        "cwd": str(ws),
        "permission_mode": "acceptEdits",
        "tool_name": "Bash",
        "tool_input": {"command": "ls", "timeout": 1000},
        "tool_use_id": "toolu_42",
    }
    env = dict(line.split("=", 1) for line in (ws / "env.txt").read_text().splitlines())
    # /bin/sh adds a few of its own (PWD, SHLVL, _); nothing comes from the daemon's environment.
    assert "TOOLJAIL_SECRET_TOKEN" not in env
    assert set(env) - {"PWD", "SHLVL", "_", "OLDPWD"} == {
        "PATH",
        "HOME",
        "LANG",
        "CLAUDE_PROJECT_DIR",
        "TOOLJAIL_WORKSPACE",
    }
    assert env["CLAUDE_PROJECT_DIR"] == env["TOOLJAIL_WORKSPACE"] == str(ws)
    # Not the workspace: linters would load configuration and plugins the model wrote there.
    assert (ws / "cwd.txt").read_text().strip() == "/"


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(
            {
                "hookSpecificOutput": {
                    "hookEventName": "PreToolUse",
                    "permissionDecision": "allow",
                    "permissionDecisionReason": "long builds need more time",
                    "updatedInput": {"command": "make all", "timeout": 600_000},
                }
            },
            id="hookSpecificOutput",
        ),
        pytest.param({"updatedInput": {"command": "make all", "timeout": 600_000}}, id="flat"),
    ],
)
async def test_hook_rewrites_bash_timeout(tmp_path: Path, ws: Path, answer: dict[str, Any]) -> None:
    body = """
        import json, sys
        data = json.load(sys.stdin)
        new_input = dict(data["tool_input"], timeout=600000)
        answer = ANSWER
        answer.get("hookSpecificOutput", answer)["updatedInput"] = new_input
        print(json.dumps(answer))
    """.replace("ANSWER", repr({k: v for k, v in answer.items() if k != "updatedInput"}))
    engine = HookEngine([hook(PRE, script(tmp_path, "timeout.py", body, python=True))])

    outcome = await engine.pre_tool_use(bash_call(ws, "make all", timeout=1000))

    assert outcome.updated_input == {"command": "make all", "timeout": 600_000}
    expected = Outcome.ALLOW if "hookSpecificOutput" in answer else None
    assert outcome.decision is expected
    assert outcome.results[0].status == "ok"


@pytest.mark.parametrize(
    ("answer", "decision", "reason"),
    [
        ({"decision": "block", "reason": "legacy no"}, Outcome.DENY, "legacy no"),
        ({"decision": "approve", "reason": "legacy yes"}, Outcome.ALLOW, "legacy yes"),
        ({"permissionDecision": "ask", "permissionDecisionReason": "flat ask"}, Outcome.ASK, None),
        ({"continue": False, "stopReason": "stop everything"}, Outcome.DENY, "stop everything"),
        (
            {
                "decision": "approve",
                "hookSpecificOutput": {"permissionDecision": "deny"},
            },
            Outcome.DENY,
            "the hook denied the call without giving a reason",
        ),
    ],
    ids=["legacy-block", "legacy-approve", "flat-ask", "continue-false", "specific-beats-legacy"],
)
async def test_json_decision_shapes(
    tmp_path: Path,
    ws: Path,
    answer: dict[str, Any],
    decision: Outcome,
    reason: str | None,
) -> None:
    engine = HookEngine([json_hook(tmp_path, "decide.py", answer)])

    outcome = await engine.pre_tool_use(bash_call(ws, "ls"))

    assert outcome.decision is decision
    if reason is not None:
        assert outcome.reasons == (f"Hook 'decide.py': {reason}",)


async def test_deny_beats_ask_beats_allow(tmp_path: Path, ws: Path) -> None:
    allow = json_hook(tmp_path, "a.py", {"permissionDecision": "allow"}, name="allow")
    answer = {"permissionDecision": "ask", "permissionDecisionReason": "check"}
    ask = json_hook(tmp_path, "b.py", answer, name="ask")
    deny = hook(PRE, "echo nope >&2; exit 2", name="deny")

    both = await HookEngine([allow, ask]).pre_tool_use(bash_call(ws, "ls"))
    assert both.decision is Outcome.ASK
    assert both.reasons == ("Hook 'ask': check",)

    all_three = await HookEngine([allow, ask, deny]).pre_tool_use(bash_call(ws, "ls"))
    assert all_three.decision is Outcome.DENY
    assert all_three.reasons == ("Hook 'deny': nope",)
    assert [e["decision"] for e in all_three.to_policy()] == ["allow", "ask", "deny"]


async def test_conflicting_rewrites_deny(tmp_path: Path, ws: Path) -> None:
    one = json_hook(tmp_path, "one.py", {"updatedInput": {"command": "ls -a"}})
    two = json_hook(tmp_path, "two.py", {"updatedInput": {"command": "rm -rf build"}})
    same = json_hook(tmp_path, "same.py", {"updatedInput": {"command": "ls -a"}})

    agreed = await HookEngine([one, same]).pre_tool_use(bash_call(ws, "ls"))
    assert agreed.updated_input == {"command": "ls -a"}
    assert agreed.decision is None

    outcome = await HookEngine([one, two]).pre_tool_use(bash_call(ws, "ls"))
    assert outcome.decision is Outcome.DENY
    assert outcome.updated_input is None
    assert "'one.py', 'two.py' each rewrote the input differently" in outcome.reasons[0]
    assert outcome.to_policy()[-1]["decision"] == "deny"


async def test_pre_hook_additional_context(tmp_path: Path, ws: Path) -> None:
    answer = {"hookSpecificOutput": {"additionalContext": "Builds live in ./out."}}
    outcome = await HookEngine([json_hook(tmp_path, "ctx.py", answer)]).pre_tool_use(
        bash_call(ws, "ls")
    )

    assert outcome.additional_context == ("[PreToolUse hook 'ctx.py'] Builds live in ./out.",)


# --- Post events -----------------------------------------------------------------------------

POST_CONTEXT = """
    import json, sys
    data = json.load(sys.stdin)
    response = data["tool_response"]
    context = f"{data['hook_event_name']} saw {response['content']!r}"
    context += f" is_error={response['is_error']}"
    if "error" in data:
        context += f" error={data['error']!r}"
    print(json.dumps({"hookSpecificOutput": {
        "hookEventName": data["hook_event_name"], "additionalContext": context}}))
"""


async def test_post_tool_use_hook_adds_context(tmp_path: Path, ws: Path) -> None:
    path = script(tmp_path, "post.py", POST_CONTEXT, python=True)
    engine = HookEngine([hook(POST, path, name="post"), hook(FAILURE, path, name="failure")])
    call = bash_call(ws, "echo hi")

    outcome = await engine.post_tool_use(call, [TextContent(text="hi")], is_error=False)

    assert outcome.withheld == ""
    assert outcome.additional_context == (
        "[PostToolUse hook 'post'] PostToolUse saw 'hi' is_error=False",
    )
    assert [r.name for r in outcome.results] == ["post"]


async def test_post_tool_use_failure_runs_on_errors_only(tmp_path: Path, ws: Path) -> None:
    path = script(tmp_path, "post.py", POST_CONTEXT, python=True)
    engine = HookEngine([hook(POST, path, name="post"), hook(FAILURE, path, name="failure")])
    failed = [TextContent(text="Exit code 1\nboom")]

    outcome = await engine.post_tool_use(bash_call(ws, "false"), failed, is_error=True)

    assert [r.name for r in outcome.results] == ["failure"]
    assert outcome.additional_context == (
        "[PostToolUseFailure hook 'failure'] PostToolUseFailure saw 'Exit code 1\\nboom' "
        "is_error=True error='Exit code 1\\nboom'",
    )


async def test_post_exit_2_and_block_reach_the_model(tmp_path: Path, ws: Path) -> None:
    engine = HookEngine(
        [
            hook(POST, "echo 'lint: 3 warnings in a.py' >&2; exit 2", name="lint"),
            json_hook(tmp_path, "b.py", {"decision": "block", "reason": "run tests"}, event=POST),
        ]
    )

    outcome = await engine.post_tool_use(bash_call(ws, "x"), [TextContent(text="ok")], False)

    assert outcome.withheld == ""
    assert outcome.additional_context == (
        "[PostToolUse hook 'lint'] lint: 3 warnings in a.py",
        "[PostToolUse hook 'b.py'] run tests",
    )
    assert {r.decision for r in outcome.results} == {"none"}


async def test_post_hook_ignores_huge_unread_input(ws: Path) -> None:
    """A hook that never reads its stdin does not hang on a large tool_response."""
    engine = HookEngine([hook(POST, "exit 0", timeout_s=10)])
    content = [TextContent(text="x" * 3_000_000)]

    started = time.monotonic()
    outcome = await engine.post_tool_use(bash_call(ws, "x"), content, False)

    assert outcome.results[0].status == "ok"
    assert time.monotonic() - started < 5


# --- Faults: timeouts, crashes, bad output ---------------------------------------------------

HANG = """
    read -r _ _ _ _ pgid _ < /proc/$$/stat
    echo "$pgid" > "$CLAUDE_PROJECT_DIR/group.pid"
    sleep 300 &
    echo $! > "$CLAUDE_PROJECT_DIR/child.pid"
    sleep 300
"""


async def test_hanging_hook_times_out_denies_and_kills_its_group(tmp_path: Path, ws: Path) -> None:
    engine = HookEngine([hook(PRE, script(tmp_path, "hang.sh", HANG), name="hang", timeout_s=0.5)])

    started = time.monotonic()
    outcome = await engine.pre_tool_use(bash_call(ws, "ls"))

    assert time.monotonic() - started < 5
    assert outcome.decision is Outcome.DENY
    assert outcome.reasons == (
        "The PreToolUse hook 'hang' did not finish within 0.5 s and was killed; it is configured "
        "to fail closed, so the call is denied. The operator must fix the hook before calls like "
        "this can go through.",
    )
    assert outcome.results[0].status == "timeout"
    group = int((ws / "group.pid").read_text())
    child = int((ws / "child.pid").read_text())
    assert await gone(lambda: group_alive(group))
    assert not alive(child)


async def test_cancelled_call_kills_hook_processes(tmp_path: Path, ws: Path) -> None:
    engine = HookEngine([hook(PRE, script(tmp_path, "hang.sh", HANG), timeout_s=60)])
    task = asyncio.create_task(engine.pre_tool_use(bash_call(ws, "ls")))
    for _ in range(100):
        if (ws / "child.pid").exists():
            break
        await asyncio.sleep(0.05)
    group = int((ws / "group.pid").read_text())

    assert group_alive(group)

    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert await gone(lambda: group_alive(group))


SPAWN_AND_SLEEP = (
    "import subprocess, sys, time;"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', sys.argv[1]]);"
    "time.sleep(300)"
)


async def test_cancellation_at_any_point_leaves_no_process(ws: Path) -> None:
    """Also while the hook is starting (the process exists before its pipes are connected), and
    once it has a child of its own."""
    for pause in [0.0] * 10 + [0.05, 0.3, 0.6]:
        token = f"tooljail-hook-test-{uuid.uuid4().hex}"
        engine = HookEngine([hook(PRE, [sys.executable, "-c", SPAWN_AND_SLEEP, token])])
        task = asyncio.create_task(engine.pre_tool_use(bash_call(ws, "ls")))
        await asyncio.sleep(pause)

        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

        assert await gone(lambda token=token: running_with(token)), f"left running ({pause} s)"


async def test_leftover_background_process_is_killed_after_exit(ws: Path) -> None:
    body = 'sleep 300 & echo $! > "$CLAUDE_PROJECT_DIR/child.pid"; exit 0'
    outcome = await HookEngine([hook(PRE, body)]).pre_tool_use(bash_call(ws, "ls"))

    assert outcome.results[0].status == "ok"
    child = int((ws / "child.pid").read_text())
    assert await gone(lambda: alive(child))


CRASH = """
    import os, signal
    os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("shell", [True, False], ids=["shell", "argv"])
async def test_crashing_hook_follows_on_error(tmp_path: Path, ws: Path, shell: bool) -> None:
    path = script(tmp_path, "crash.py", CRASH, python=True)
    command: Path | list[str] = path if shell else [str(path)]
    call = bash_call(ws, "ls")

    open_ = await HookEngine([hook(PRE, command, name="crash", on_error="allow")]).pre_tool_use(
        call
    )
    assert open_.decision is None
    assert (open_.results[0].status, open_.results[0].decision) == ("crashed", "none")
    assert open_.results[0].reason == "crashed (killed by signal 9)"

    closed = await HookEngine([hook(PRE, command, name="crash")]).pre_tool_use(call)
    assert closed.decision is Outcome.DENY
    assert closed.reasons[0].startswith(
        "The PreToolUse hook 'crash' crashed (killed by signal 9); it is configured to fail closed"
    )


@pytest.mark.parametrize(
    "command",
    [
        pytest.param("/nonexistent/guard.sh", id="shell-not-found"),
        pytest.param(["/nonexistent/guard"], id="argv-not-found"),
    ],
)
async def test_missing_hook_program_fails_closed(ws: Path, command: str | list[str]) -> None:
    outcome = await HookEngine([hook(PRE, command, name="guard")]).pre_tool_use(bash_call(ws, "ls"))

    assert outcome.decision is Outcome.DENY
    assert outcome.results[0].status == "crashed"
    assert "The PreToolUse hook 'guard' could not run" in outcome.reasons[0]


async def test_post_hook_fails_open_by_default_and_closed_on_request(ws: Path) -> None:
    content = [TextContent(text="secret-looking output")]
    call = bash_call(ws, "cat x")

    lenient = HookEngine([hook(POST, "sleep 30", name="scan", timeout_s=0.3)])
    outcome = await lenient.post_tool_use(call, content, False)
    assert outcome.withheld == ""
    assert outcome.results[0].status == "timeout"

    strict = HookEngine([hook(POST, "sleep 30", name="scan", timeout_s=0.3, on_error="deny")])
    outcome = await strict.post_tool_use(call, content, False)
    assert outcome.withheld == (
        "The PostToolUse hook 'scan' did not finish within 0.3 s and was killed; it is "
        "configured to fail closed, so the call's result is withheld (the call itself did "
        "run). The operator must fix the hook before calls like this can go through."
    )


@pytest.mark.parametrize(
    ("command", "status", "logged"),
    [
        ("echo '{\"hookSpecificOutput\": {'", "error", "not valid JSON"),
        ("echo '{}{}'", "error", "not valid JSON"),
        ('echo \'{"permissionDecision": "maybe"}\'', "error", "permissionDecision"),
        ('echo \'{"updatedInput": "ls"}\'', "error", "updatedInput must be an object"),
        ("echo 'checking the command...'", "ok", None),
        ("echo 'broken' >&2; exit 1", "error", "exited with status 1"),
    ],
    ids=["invalid-json", "two-objects", "bad-decision", "bad-rewrite", "plain-text", "exit-1"],
)
async def test_bad_output_is_a_logged_non_blocking_error(
    ws: Path,
    caplog: pytest.LogCaptureFixture,
    command: str,
    status: str,
    logged: str | None,
) -> None:
    caplog.set_level(logging.WARNING, logger="daemon.hooks")
    engine = HookEngine([hook(PRE, command, name="sloppy")])

    outcome = await engine.pre_tool_use(bash_call(ws, "ls"))

    assert outcome.decision is None
    assert outcome.updated_input is None
    assert outcome.results[0].status == status
    messages = [r.getMessage() for r in caplog.records]
    if logged is None:
        assert messages == []
    else:
        assert any("'sloppy'" in m and logged in m for m in messages), messages


async def test_huge_output_is_capped(ws: Path) -> None:
    flood = "head -c 5000000 /dev/zero | tr '\\0' x; head -c 5000000 /dev/zero | tr '\\0' y >&2"
    engine = HookEngine([hook(PRE, f"{flood}; exit 2", name="flood")])

    outcome = await engine.pre_tool_use(bash_call(ws, "ls"))

    [result] = outcome.results
    assert result.output_truncated
    assert result.decision == "deny"
    assert result.reason.startswith("y" * MAX_TEXT_CHARS)
    assert result.reason.endswith(f"[{OUTPUT_CAP_BYTES - MAX_TEXT_CHARS:,} more characters cut]")


async def test_huge_json_answer_is_not_read(tmp_path: Path, ws: Path) -> None:
    body = f"""
        import json
        print(json.dumps({{"additionalContext": "z" * {2 * OUTPUT_CAP_BYTES}}}))
    """
    engine = HookEngine([hook(PRE, script(tmp_path, "big.py", body, python=True), name="big")])

    outcome = await engine.pre_tool_use(bash_call(ws, "ls"))

    assert outcome.results[0].status == "error"
    assert "longer than 64 KiB" in outcome.results[0].reason
    assert outcome.additional_context == ()


# --- Parallelism and matching ----------------------------------------------------------------

STAMP = """
    import json, pathlib, sys, time
    name = sys.argv[1]
    workspace = pathlib.Path(json.load(sys.stdin)["cwd"])
    start = time.time()
    time.sleep(0.6)
    (workspace / f"{name}.json").write_text(json.dumps([start, time.time()]))
"""


async def test_matching_hooks_run_in_parallel(tmp_path: Path, ws: Path) -> None:
    path = str(script(tmp_path, "stamp.py", STAMP, python=True))
    names = ["h1", "h2", "h3"]
    engine = HookEngine([hook(PRE, [path, n], name=n, matcher="Bash") for n in names])

    outcome = await engine.pre_tool_use(bash_call(ws, "ls"))

    assert [r.status for r in outcome.results] == ["ok", "ok", "ok"]
    spans = [json.loads((ws / f"{n}.json").read_text()) for n in names]
    # Every hook started before any of them finished: they overlapped.
    assert max(start for start, _ in spans) < min(end for _, end in spans)


@pytest.mark.parametrize(
    ("matcher", "matched", "unmatched"),
    [
        ("Bash", ["Bash"], ["bash", "BashOutput", "MyBash"]),
        ("Edit|Write", ["Edit", "Write"], ["MultiEdit", "Edit|Write", "WriteX"]),
        ("Notebook.*", ["NotebookEdit", "Notebook"], ["MyNotebook"]),
        ("mcp__github__.*", ["mcp__github__create_pr"], ["mcp__gitlab__x"]),
        ("", ["Bash", "Read"], []),
        ("*", ["Bash", "Read"], []),
    ],
)
def test_matcher_forms(matcher: str, matched: list[str], unmatched: list[str]) -> None:
    spec = hook(PRE, "true", matcher=matcher)
    assert [t for t in matched if spec.matches(t)] == matched
    assert [t for t in unmatched if spec.matches(t)] == []


async def test_only_matching_hooks_of_the_event_run(ws: Path) -> None:
    engine = HookEngine(
        [
            hook(PRE, "exit 2", matcher="Write|Edit", name="files"),
            hook(POST, "exit 2", matcher="Bash", name="post"),
            hook(PRE, "true", matcher="Bash", name="bash"),
        ]
    )
    assert [h.name for h in engine.matching(PRE, "Bash")] == ["bash"]

    outcome = await engine.pre_tool_use(bash_call(ws, "ls"))
    assert [r.name for r in outcome.results] == ["bash"]
    assert outcome.decision is None


# --- Configuration ---------------------------------------------------------------------------


class _Config(BaseModel):
    hooks: HookList = ()


def test_config_defaults_names_and_errors() -> None:
    config = _Config.model_validate(
        {
            "hooks": [
                {"event": "PreToolUse", "command": "/opt/hooks/guard.sh --strict"},
                {"event": "PostToolUse", "command": ["/opt/hooks/guard.sh"]},
                {"event": "PostToolUseFailure", "command": "notify", "name": "notify-team"},
            ]
        }
    )
    pre, post, failure = config.hooks
    assert [h.name for h in config.hooks] == ["guard.sh", "guard.sh#2", "notify-team"]
    assert (pre.timeout_s, pre.fails_closed, post.fails_closed) == (60.0, True, False)
    assert failure.model_copy(update={"on_error": "deny"}).fails_closed

    bad = [
        ({"event": "PreToolUse", "command": "x", "matcher": "Edit("}, "not a valid regular"),
        ({"event": "BeforeTool", "command": "x"}, "PreToolUse"),
        ({"event": "PreToolUse", "command": "  "}, "command is empty"),
        ({"event": "PreToolUse", "command": []}, "argv list is empty"),
        ({"event": "PreToolUse", "command": "x", "timeout": 5}, "Extra inputs"),
        ({"event": "PreToolUse", "command": "x", "on_error": "ignore"}, "'deny' or 'allow'"),
    ]
    for raw, message in bad:
        with pytest.raises(ValidationError, match=re.escape(message)):
            _Config.model_validate({"hooks": [raw]})
    with pytest.raises(ValidationError, match="used more than once: g"):
        _Config.model_validate(
            {
                "hooks": [
                    {"event": "PreToolUse", "command": "a", "name": "g"},
                    {"event": "PostToolUse", "command": "b", "name": "g"},
                ]
            }
        )


def test_documented_toml_example_loads() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "hooks.md").read_text()
    block = re.search(r"```toml\n(.*?)```", doc, re.DOTALL)
    assert block is not None
    config = _Config.model_validate(tomllib.loads(block.group(1)))
    assert {h.event for h in config.hooks} == {PRE, POST, FAILURE}
    assert len({h.name for h in config.hooks}) == len(config.hooks)


FAILING_GUARDS = {
    "exit 1": "exit 1",
    "exit 3 with a message": "echo 'boom: unexpected input' >&2; exit 3",
    "malformed JSON": "echo '{\"decision\": '; exit 0",
    "JSON that is not an object": "echo '{\"hookSpecificOutput\": 5}'; exit 0",
}


@pytest.mark.parametrize("body", FAILING_GUARDS.values(), ids=FAILING_GUARDS.keys())
async def test_a_guard_that_fails_in_any_way_denies_the_call(ws: Path, body: str) -> None:
    guard = HookEngine([hook(PRE, body, name="guard", guard=True)])
    outcome = await guard.pre_tool_use(bash_call(ws, "rm -rf ."))
    assert outcome.decision is Outcome.DENY, outcome
    assert outcome.reasons and "guard" in outcome.reasons[0]

    # The same failure of a hook that is no guard is a non-blocking error, as in Claude Code...
    plain = HookEngine([hook(PRE, body, name="linter")])
    assert (await plain.pre_tool_use(bash_call(ws, "rm -rf ."))).decision is None
    # ...unless its on_error says deny.
    strict = HookEngine([hook(PRE, body, name="strict", on_error="deny")])
    assert (await strict.pre_tool_use(bash_call(ws, "rm -rf ."))).decision is Outcome.DENY


async def test_a_guard_may_be_told_to_fail_open(ws: Path) -> None:
    lenient = HookEngine([hook(PRE, "exit 1", name="g", guard=True, on_error="allow")])
    assert (await lenient.pre_tool_use(bash_call(ws, "ls"))).decision is None
