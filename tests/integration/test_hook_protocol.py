"""The rest of Claude Code's hook protocol in the daemon (real OPA, real Docker): PostToolUse
replacing the output (a redaction that live output does not get around), PermissionRequest hooks
answering the policy's asks (the policy still deciding, seeing the hook as the approver),
PostToolBatch after a batch and a turn, systemMessage reaching the caller, and
PostToolUseFailure on an interrupted call."""

from __future__ import annotations

import json
import os
import shutil
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon._generated.tooljail.v1 import executor_pb2_grpc as pb_grpc
from tests.integration.conftest import OWNER_GID, OWNER_UID
from tests.integration.harness import PROJECT_ROOT, RunningDaemon, running_daemon, text_of
from tests.integration.test_scheduling import tool_use

pytestmark = [pytest.mark.integration, pytest.mark.docker]

REDACT = """
import json, sys
call = json.load(sys.stdin)
text = call["tool_response"]["content"]
print(json.dumps({
    "systemMessage": "redacted %d secrets" % text.count("TOPSECRET"),
    "hookSpecificOutput": {"hookEventName": "PostToolUse",
                           "updatedToolOutput": text.replace("TOPSECRET", "[redacted]")},
}))
"""
PERMISSION = """
import json, sys
call = json.load(sys.stdin)
path = call["tool_input"]["file_path"]
assert call["hook_event_name"] == "PermissionRequest" and call["reasons"], call
if path.endswith(".txt"):
    answer = {"behavior": "allow"}
elif path.endswith(".secret"):
    answer = {"behavior": "deny", "message": "secrets are not written by agents"}
else:
    sys.exit(0)
print(json.dumps({"hookSpecificOutput": {"hookEventName": "PermissionRequest",
                                         "decision": answer}}))
"""
RECORD_INTERRUPT = """
import json, sys
call = json.load(sys.stdin)
if call.get("is_interrupt"):
    with open(sys.argv[1], "w") as out:
        json.dump(call, out)
"""
BATCH = """
import json, sys
batch = json.load(sys.stdin)
names = ",".join(c["tool_name"] for c in batch["tool_calls"])
print(json.dumps({"systemMessage": "batch done",
                  "hookSpecificOutput": {"hookEventName": "PostToolBatch",
                                         "additionalContext": "the batch ran " + names}}))
"""
GREET = """
import json
print(json.dumps({"systemMessage": "pre says hi"}))
"""


def script(folder: Path, name: str, body: str) -> tuple[str, ...]:
    path = folder / name
    path.write_text(textwrap.dedent(body))
    return (sys.executable, str(path))


@pytest.fixture(scope="module")
def daemon(short_tmp: Path) -> Iterator[RunningDaemon]:
    root = short_tmp / "hook-protocol"
    hooks_dir = root / "hooks"
    hooks_dir.mkdir(parents=True)
    workspace = root / "ws"
    workspace.mkdir()
    os.chown(workspace, OWNER_UID, OWNER_GID)
    policies = root / "policies"
    shutil.copytree(PROJECT_ROOT / "policies", policies)
    data = json.loads((policies / "data.json").read_text())
    data["tooljail"]["principals"]["local"] = {"ask_tools": ["Write"]}
    (policies / "data.json").write_text(json.dumps(data))
    interrupts = root / "interrupt.json"
    hooks = [
        {"event": "PostToolUse", "matcher": "Bash", "name": "redact", "redacts": True,
         "command": script(hooks_dir, "redact.py", REDACT)},
        {"event": "PermissionRequest", "matcher": "Write", "name": "auto",
         "command": script(hooks_dir, "permission.py", PERMISSION)},
        {"event": "PostToolUseFailure", "matcher": "Bash", "name": "interrupts",
         "command": (*script(hooks_dir, "interrupt.py", RECORD_INTERRUPT), str(interrupts))},
        {"event": "PostToolBatch", "name": "batch",
         "command": script(hooks_dir, "batch.py", BATCH)},
        {"event": "PreToolUse", "matcher": "LS", "name": "greet",
         "command": script(hooks_dir, "greet.py", GREET)},
    ]  # fmt: skip
    with running_daemon(
        workspace,
        root / "hp.sock",
        sandbox={"pool_size": 1},
        hooks=hooks,
        opa={"policies_dir": str(policies)},
    ) as running:
        if running.daemon.sandbox is None or running.daemon.sandbox.stats() is None:
            pytest.skip("no Docker engine answers")
        yield running


def test_a_post_hook_redacts_the_output_and_live_output_does_not_leak_it(
    daemon: RunningDaemon,
) -> None:
    use = tool_use(
        "redact", "Bash", command='for i in 1 2 3; do echo TOP""SECRET $i; sleep 0.3; done'
    )
    events = list(daemon.stub.ExecuteStream(pb.ExecuteRequest(tool_use=use), timeout=120))
    answer = events[-1].response
    assert "TOPSECRET" not in text_of(answer) and "[redacted] 3" in text_of(answer)
    assert "TOPSECRET" not in json.dumps([str(event) for event in events])
    assert not any(event.HasField("progress") and event.progress.output for event in events)
    assert list(answer.system_messages) == ["[PostToolUse hook 'redact'] redacted 3 secrets"]
    record = next(r for r in daemon.audit_lines() if r["tool_use_id"] == use.id)
    assert record["hooks"][0]["replaced_output"] is True


def test_a_redacted_output_over_its_budget_is_kept_redacted(daemon: RunningDaemon) -> None:
    answer = daemon.execute(
        "Bash", {"command": 'for i in $(seq 1 4000); do echo TOP""SECRET-$i; done'}
    )
    assert answer.report.kept_output, text_of(answer)
    kept = Path(answer.report.kept_output).read_text()
    assert "TOPSECRET" not in kept and "[redacted]-4000" in kept


def test_a_permission_request_hook_approves_an_ask(daemon: RunningDaemon) -> None:
    target = daemon.workspace / "approved.txt"
    answer = daemon.execute("Write", {"file_path": str(target), "content": "by hook\n"})
    assert answer.decision.outcome == pb.ALLOW, text_of(answer)
    assert target.read_text() == "by hook\n"
    record = next(r for r in daemon.audit_lines() if r["tool_use_id"] == answer.result.tool_use_id)
    assert record["approved_by"] == "hook:auto"
    admin = pb_grpc.AdminStub(daemon.channel)
    pending = admin.ListPendingApprovals(pb.ListPendingApprovalsRequest(), timeout=30)
    assert [a for a in pending.approvals if a.tool_use_id == answer.result.tool_use_id] == []


def test_a_permission_request_hook_denies_an_ask(daemon: RunningDaemon) -> None:
    target = daemon.workspace / "key.secret"
    answer = daemon.execute("Write", {"file_path": str(target), "content": "x"})
    assert answer.decision.outcome == pb.DENY
    assert "secrets are not written by agents" in text_of(answer)
    assert not answer.decision.approval_token
    assert not target.exists()


def test_a_silent_permission_request_hook_leaves_the_ask_to_a_person(
    daemon: RunningDaemon,
) -> None:
    target = daemon.workspace / "other.md"
    answer = daemon.execute("Write", {"file_path": str(target), "content": "x"})
    assert answer.decision.outcome == pb.ASK
    assert answer.decision.approval_token
    assert not target.exists()


def test_post_tool_batch_speaks_with_the_batch_s_last_answer(daemon: RunningDaemon) -> None:
    uses = [
        tool_use("b1", "LS", path=str(daemon.workspace)),
        tool_use("b2", "Bash", command="echo two"),
    ]
    answers = list(daemon.stub.ExecuteBatch(pb.ExecuteBatchRequest(tool_uses=uses), timeout=120))
    assert [a.result.tool_use_id for a in answers] == [u.id for u in uses]
    assert "the batch ran LS,Bash" not in text_of(answers[0])
    assert "[PostToolBatch hook 'batch'] the batch ran LS,Bash" in text_of(answers[1])
    assert "[PostToolBatch hook 'batch'] batch done" in answers[1].system_messages
    assert list(answers[0].system_messages) == ["[PreToolUse hook 'greet'] pre says hi"]
    batch = [
        r for r in daemon.audit_lines("batch_hooks") if r["tool_use_ids"] == [u.id for u in uses]
    ]
    assert len(batch) == 1


def test_an_execute_turn_ends_with_what_post_tool_batch_said(daemon: RunningDaemon) -> None:
    uses = [tool_use("t1", "Bash", command="echo one"), tool_use("t2", "Bash", command="echo 2")]
    messages = [pb.TurnMessage(tool_use=use) for use in uses]
    events = list(daemon.stub.ExecuteTurn(iter(messages), timeout=120))
    answers = [e.response for e in events if e.HasField("response")]
    assert [a.result.tool_use_id for a in answers] == [u.id for u in uses]
    assert events[-1].HasField("batch_end")
    end = events[-1].batch_end
    assert list(end.additional_context) == ["[PostToolBatch hook 'batch'] the batch ran Bash,Bash"]
    assert list(end.system_messages) == ["[PostToolBatch hook 'batch'] batch done"]


def test_an_interrupted_call_runs_its_failure_hooks(daemon: RunningDaemon) -> None:
    record_file = daemon.workspace.parent / "interrupt.json"
    use = tool_use("interrupted", "Bash", command="sleep 300")
    future = daemon.stub.Execute.future(pb.ExecuteRequest(tool_use=use), timeout=120)
    time.sleep(2.0)
    future.cancel()
    with pytest.raises(grpc.FutureCancelledError):
        future.result()
    deadline = time.monotonic() + 60
    while not record_file.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    seen = json.loads(record_file.read_text())
    assert seen["hook_event_name"] == "PostToolUseFailure"
    assert seen["is_interrupt"] is True and seen["tool_use_id"] == use.id
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        records = [r for r in daemon.audit_lines("interrupted_hooks") if r["tool_use_id"] == use.id]
        if records:
            break
        time.sleep(0.2)
    assert records and records[0]["hooks"][0]["name"] == "interrupts"
