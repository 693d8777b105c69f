"""The rest of Claude Code's hook protocol in the daemon (real OPA, real Docker): PostToolUse
replacing the output (a redaction that live output does not get around), PermissionRequest hooks
answering the policy's asks (the policy still deciding, seeing the hook as the approver),
PostToolBatch after a batch and a turn, systemMessage reaching the caller, and
PostToolUseFailure on an interrupted call."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from anthropic.types import ToolResultBlockParam
from pydantic import TypeAdapter

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon._generated.tooljail.v1 import executor_pb2_grpc as pb_grpc
from tests.integration.conftest import OWNER_GID, OWNER_UID
from tests.integration.harness import RunningDaemon, policies_for, running_daemon, text_of
from tests.integration.test_scheduling import tool_use

pytestmark = [pytest.mark.integration, pytest.mark.docker]

REDACT = """
import json, re, sys
call = json.load(sys.stdin)
text = call["tool_response"]["content"]
found = re.findall("(?i)topsecret", text)
print(json.dumps({
    "systemMessage": "redacted %d secrets" % len(found),
    "hookSpecificOutput": {"hookEventName": "PostToolUse",
                           "updatedToolOutput": re.sub("(?i)topsecret", "[redacted]", text)},
}))
"""
PERMISSION = """
import json, sys, time
call = json.load(sys.stdin)
path = call["tool_input"]["file_path"]
assert call["hook_event_name"] == "PermissionRequest" and call["reasons"], call
if path.endswith(".slow"):
    time.sleep(3)
if path.endswith((".txt", ".slow")):
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
CONFIRM_PROD = """
import json, sys
call = json.load(sys.stdin)
if "prod" in call["tool_input"].get("content", ""):
    print(json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse",
        "permissionDecision": "ask", "permissionDecisionReason": "a person must confirm prod"}}))
"""
AS_IMAGE = """
import json, sys
json.load(sys.stdin)
png = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGBgAAAABQAB"
       "pfZFQAAAAABJRU5ErkJggg==")
print(json.dumps({"hookSpecificOutput": {"hookEventName": "PostToolUse", "updatedToolOutput": [
    {"type": "text", "text": "a picture instead"},
    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}}]}}))
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
    policies = policies_for(root, {"ask_tools": ["Write"], "network": "egress"})
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
        {"event": "PostToolUse", "matcher": "Glob", "name": "as-image",
         "command": script(hooks_dir, "image.py", AS_IMAGE)},
        {"event": "PreToolUse", "matcher": "Write", "name": "confirm-prod",
         "command": script(hooks_dir, "confirm.py", CONFIRM_PROD)},
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
    assert [(h["name"], h["event"]) for h in record["hooks"]] == [
        ("confirm-prod", "PreToolUse"),
        ("auto", "PermissionRequest"),
    ]
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


# --- Found by the attacker round: each was a way around a hook -------------------------------


@pytest.mark.parametrize(
    "tool_input",
    [
        {"command": 'echo TOP""SECRET; false'},
        {"command": 'echo TOP""SECRET; sleep 5', "timeout": 1000},
    ],
    ids=["failed", "timed-out"],
)
def test_a_failing_commands_output_is_redacted_too(
    daemon: RunningDaemon, tool_input: dict[str, object]
) -> None:
    answer = daemon.execute("Bash", tool_input)
    assert answer.result.is_error
    assert "TOPSECRET" not in text_of(answer) and "[redacted]" in text_of(answer), text_of(answer)


def test_a_background_commands_output_is_redacted_in_bash_output(daemon: RunningDaemon) -> None:
    started = daemon.execute("Bash", {"command": 'echo TOP""SECRET', "run_in_background": True})
    shell_id = text_of(started).split("with ID: ")[1].split(".")[0]
    text = ""
    deadline = time.monotonic() + 60
    while "<status>completed</status>" not in text and time.monotonic() < deadline:
        text = text_of(daemon.execute("BashOutput", {"bash_id": shell_id}))
        assert "TOPSECRET" not in text, text
        time.sleep(0.2)
    assert "[redacted]" in text, text


def test_the_networks_notes_are_redacted_live_and_in_the_result(daemon: RunningDaemon) -> None:
    code = (
        "import urllib.request; urllib.request.urlopen('http://TOP'+'SECRET.example/TOP'+'SECRET')"
    )
    use = tool_use("egress-note", "Bash", command=f'python3 -c "{code}"; true')
    events = list(daemon.stub.ExecuteStream(pb.ExecuteRequest(tool_use=use), timeout=120))
    everything = json.dumps([str(event) for event in events]).lower()
    assert "topsecret" not in everything, everything
    assert "[redacted].example" in text_of(events[-1].response), text_of(events[-1].response)


def _move_workspace_during(daemon: RunningDaemon, session: pb.Session, command: str) -> str:
    use = tool_use(f"moved-{time.monotonic_ns()}", "Bash", command=command)
    future = daemon.stub.Execute.future(
        pb.ExecuteRequest(tool_use=use, session_id=session.id), timeout=120
    )
    time.sleep(1.5)
    workspace = Path(session.workspace)
    workspace.rename(workspace.with_name(workspace.name + ".moved"))
    workspace.mkdir()
    return text_of(future.result())


def test_a_workspace_moved_during_the_call_withholds_what_was_not_redacted(
    daemon: RunningDaemon,
) -> None:
    session = daemon.stub.OpenSession(pb.OpenSessionRequest(), timeout=30)
    try:
        text = _move_workspace_during(daemon, session, 'echo TOP""SECRET; sleep 3')
    finally:
        daemon.stub.CloseSession(pb.CloseSessionRequest(session_id=session.id), timeout=30)
    assert "TOPSECRET" not in text, text
    assert "Its output is withheld: a redacting hook had to see it first." in text


def test_batch_hooks_do_not_run_over_a_replaced_workspace(daemon: RunningDaemon) -> None:
    session = daemon.stub.OpenSession(pb.OpenSessionRequest(), timeout=30)
    try:
        workspace = Path(session.workspace)
        workspace.rename(workspace.with_name(workspace.name + ".moved"))
        workspace.mkdir()
        uses = [tool_use("swapped-1", "LS", path=str(workspace))]
        answers = list(
            daemon.stub.ExecuteBatch(
                pb.ExecuteBatchRequest(tool_uses=uses, session_id=session.id), timeout=60
            )
        )
    finally:
        daemon.stub.CloseSession(pb.CloseSessionRequest(session_id=session.id), timeout=30)
    assert answers[0].result.is_error and "moved" in text_of(answers[0])
    assert "PostToolBatch" not in text_of(answers[0]) and not answers[0].system_messages


def test_a_hook_approval_does_not_lift_a_pre_tool_use_hooks_ask(daemon: RunningDaemon) -> None:
    target = daemon.workspace / "deploy.txt"
    answer = daemon.execute("Write", {"file_path": str(target), "content": "prod settings"})
    assert answer.decision.outcome == pb.ASK, text_of(answer)
    assert "a person must confirm prod" in text_of(answer)
    assert not target.exists()


def test_a_person_answering_while_the_hook_runs_gets_a_clean_answer(daemon: RunningDaemon) -> None:
    admin = pb_grpc.AdminStub(daemon.channel)
    target = daemon.workspace / "race.slow"
    use = tool_use("race-1", "Write", file_path=str(target), content="x")
    future = daemon.stub.Execute.future(pb.ExecuteRequest(tool_use=use), timeout=60)
    deadline = time.monotonic() + 20
    pending: list[pb.PendingApproval] = []
    while not pending and time.monotonic() < deadline:
        listed = admin.ListPendingApprovals(pb.ListPendingApprovalsRequest(), timeout=30)
        pending = [a for a in listed.approvals if a.tool_use_id == use.id]
        time.sleep(0.1)
    assert pending
    admin.Deny(pb.AnswerApprovalRequest(approval_id=pending[0].approval_id, note="no"), timeout=30)
    answer = future.result()  # an answer, not a gRPC error
    assert answer.decision.outcome == pb.ASK, text_of(answer)
    assert not target.exists()


def test_a_principal_refusing_hook_approvals_still_gets_asked(short_tmp: Path) -> None:
    root = short_tmp / "no-hook-approvals"
    hooks_dir = root / "hooks"
    hooks_dir.mkdir(parents=True)
    workspace = root / "ws"
    workspace.mkdir()
    os.chown(workspace, OWNER_UID, OWNER_GID)
    policies = policies_for(root, {"ask_tools": ["Write"], "hook_approvals": False})
    hooks = [{"event": "PermissionRequest", "matcher": "Write", "name": "auto",
              "command": script(hooks_dir, "permission.py", PERMISSION)}]  # fmt: skip
    with running_daemon(
        workspace, root / "nh.sock", sandbox={"enabled": False}, hooks=hooks,
        opa={"policies_dir": str(policies)},
    ) as refusing:  # fmt: skip
        answer = refusing.execute("Write", {"file_path": str(workspace / "a.txt"), "content": "x"})
    assert answer.decision.outcome == pb.ASK, text_of(answer)
    assert answer.decision.approval_token, "nobody could ever approve it"


def test_a_replaced_output_is_a_valid_anthropic_tool_result(daemon: RunningDaemon) -> None:
    answer = daemon.execute("Glob", {"pattern": "*"})
    block = json.loads(answer.tool_result_json)
    TypeAdapter(ToolResultBlockParam).validate_python(block)
    assert [c["type"] for c in block["content"]] == ["text", "image"]
    assert block["content"][1]["source"]["media_type"] == "image/png"
    images = [b.image for b in answer.result.content if b.HasField("image")]
    assert images and images[0].data.startswith(b"\x89PNG")
