"""Hooks in the daemon, as Claude Code runs them: a blocking PreToolUse hook, an input rewrite,
a PostToolUse hook adding context, a hanging hook (fail closed, named)."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from tests.integration.conftest import OWNER_GID, OWNER_UID
from tests.integration.harness import RunningDaemon, running_daemon, text_of

pytestmark = [pytest.mark.integration, pytest.mark.docker]

BLOCK_GIT_PUSH = """
import json, sys
call = json.load(sys.stdin)
if "git push" in call["tool_input"].get("command", ""):
    print("git push is blocked by the team's hook", file=sys.stderr)
    sys.exit(2)
"""
CAP_TIMEOUT = """
import json, sys
call = json.load(sys.stdin)
tool_input = dict(call["tool_input"], timeout=1000)
print(json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse",
                                         "updatedInput": tool_input}}))
"""
WHERE_AM_I = """
import json, os, sys
call = json.load(sys.stdin)
with open(os.path.join(call["cwd"], "hook-cwd.txt"), "w") as out:
    out.write(os.getcwd())
"""
GUARD_THAT_CRASHES = """
import json, sys
call = json.load(sys.stdin)
if "\\x00" in call["tool_input"]["pattern"] or len(call["tool_input"]["pattern"]) > 20:
    raise ValueError("the guard did not expect this")
print(json.dumps({"systemMessage": "checked " + call["tool_input"]["pattern"]}))
"""
ADD_CONTEXT = """
import json, sys
call = json.load(sys.stdin)
print(json.dumps({"hookSpecificOutput": {"hookEventName": "PostToolUse",
                  "additionalContext": "post-hook saw " + call["tool_name"]}}))
"""


def script(folder: Path, name: str, body: str) -> tuple[str, ...]:
    path = folder / name
    path.write_text(textwrap.dedent(body))
    return (sys.executable, str(path))


@pytest.fixture(scope="module")
def hooked(short_tmp: Path) -> Iterator[RunningDaemon]:
    hooks_dir = short_tmp / "hooks"
    hooks_dir.mkdir()
    workspace = short_tmp / "ws-hooks"
    workspace.mkdir()
    os.chown(workspace, OWNER_UID, OWNER_GID)
    hooks = [
        {"event": "PreToolUse", "matcher": "Bash", "name": "no-push",
         "command": script(hooks_dir, "block.py", BLOCK_GIT_PUSH)},
        {"event": "PreToolUse", "matcher": "Bash", "name": "cap-timeout",
         "command": script(hooks_dir, "cap.py", CAP_TIMEOUT)},
        {"event": "PostToolUse", "matcher": "Read|Bash", "name": "context",
         "command": script(hooks_dir, "context.py", ADD_CONTEXT)},
        {"event": "PreToolUse", "matcher": "Glob", "name": "sleepy", "timeout_s": 1,
         "command": "sleep 30"},
        {"event": "PreToolUse", "matcher": "LS", "name": "where",
         "command": script(hooks_dir, "where.py", WHERE_AM_I)},
        {"event": "PreToolUse", "matcher": "Grep", "name": "grep-guard", "guard": True,
         "command": script(hooks_dir, "guard.py", GUARD_THAT_CRASHES)},
    ]  # fmt: skip
    with running_daemon(
        workspace, short_tmp / "hooks.sock", sandbox={"pool_size": 1}, hooks=hooks
    ) as daemon:
        if daemon.daemon.sandbox is None or daemon.daemon.sandbox.stats() is None:
            pytest.skip("no Docker engine answers")
        yield daemon


def test_pre_hook_blocks_git_push_with_its_reason(hooked: RunningDaemon) -> None:
    answer = hooked.execute("Bash", {"command": "git push origin main"})
    assert answer.decision.outcome == pb.DENY
    assert "blocked by the team's hook" in text_of(answer)
    assert "no-push" in text_of(answer)


def test_pre_hook_rewrites_the_timeout(hooked: RunningDaemon) -> None:
    answer = hooked.execute("Bash", {"command": "sleep 20; echo late", "timeout": 60000})
    assert answer.report.timed_out, text_of(answer)
    assert "late" not in text_of(answer)
    # The audit shows what ran, not only what the model asked, and which hook changed it.
    record = next(r for r in hooked.audit_lines() if r["tool_use_id"] == answer.result.tool_use_id)
    assert record["input"]["timeout"] == 60000
    assert record["effective_input"]["timeout"] == 1000
    assert record["input_rewritten_by"] == ["cap-timeout"]


def test_hooks_start_outside_the_workspace_and_get_it_as_data(hooked: RunningDaemon) -> None:
    answer = hooked.execute("LS", {"path": str(hooked.workspace)})
    assert answer.decision.outcome == pb.ALLOW, text_of(answer)
    assert (hooked.workspace / "hook-cwd.txt").read_text() == "/"


def test_what_hooks_say_is_masked_in_the_audit_like_the_input(hooked: RunningDaemon) -> None:
    """Attack: a hook echoing the input put a secret in the audit that the input's mask hid."""
    answer = hooked.execute("Grep", {"pattern": "PASSWORD=hunter2"})
    assert answer.decision.outcome == pb.ALLOW, text_of(answer)
    record = next(r for r in hooked.audit_lines() if r["tool_use_id"] == answer.result.tool_use_id)
    assert "hunter2" not in json.dumps(record), record
    assert any("PASSWORD=***masked***" in str(h) for h in record["hooks"]), record["hooks"]


def test_a_guard_that_crashes_on_a_crafted_input_denies_it(hooked: RunningDaemon) -> None:
    plain = hooked.execute("Grep", {"pattern": "alpha"})
    assert plain.decision.outcome == pb.ALLOW, text_of(plain)
    crafted = hooked.execute("Grep", {"pattern": "a" * 40})
    assert crafted.decision.outcome == pb.DENY
    assert "grep-guard" in text_of(crafted) and "exited with status 1" in text_of(crafted)


def test_post_hook_adds_context_for_the_model(hooked: RunningDaemon) -> None:
    target = hooked.workspace / "a.txt"
    target.write_text("alpha\n")
    answer = hooked.execute("Read", {"file_path": str(target)})
    assert "alpha" in text_of(answer)
    assert "post-hook saw Read" in text_of(answer)


def test_a_long_output_cut_to_its_budget_keeps_the_hooks_note(hooked: RunningDaemon) -> None:
    answer = hooked.execute("Bash", {"command": "seq 1 300000"})
    text = text_of(answer)
    assert answer.report.truncated and answer.report.kept_output
    assert text.startswith("<persisted-output>") and ":\n1\n2\n3\n" in text
    assert text.endswith("</persisted-output>\n\n[PostToolUse hook 'context'] post-hook saw Bash")
    assert len(text) <= 30_000


def test_hanging_hook_fails_closed_naming_the_hook(hooked: RunningDaemon) -> None:
    answer = hooked.execute("Glob", {"pattern": "*"})
    assert answer.decision.outcome == pb.DENY
    assert "sleepy" in text_of(answer)
    record = next(r for r in hooked.audit_lines() if r["tool_use_id"] == answer.result.tool_use_id)
    assert record["outcome"] == "deny"
