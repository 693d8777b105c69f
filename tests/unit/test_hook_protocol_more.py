"""The rest of the hook protocol, on real hook processes: PostToolUse replacing the output (its
shapes, conflicts, a redacting hook failing closed), PermissionRequest answers, PostToolBatch
input and output, and systemMessage."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from daemon.calls import hook_stage
from daemon.calls.hook_stage import HookStage
from daemon.hooks import HookCall, HookEngine, HookEvent, HookSpec
from daemon.hooks.protocol import BatchCall, hook_input
from daemon.models import ImageContent, Outcome, TextContent
from daemon.sessions.session import Session
from daemon.tools.builtin import builtin_registry
from daemon.tools.call import ToolCall
from tests.unit.test_hooks import bash_call, hook, json_hook, script

POST = HookEvent.POST_TOOL_USE
PERMISSION = HookEvent.PERMISSION_REQUEST
BATCH = HookEvent.POST_TOOL_BATCH
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\nfake").decode()


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "workspace"
    path.mkdir()
    return path.resolve()


def replacing(tmp_path: Path, name: str, value: Any, **fields: Any) -> HookSpec:
    answer = {"hookSpecificOutput": {"hookEventName": "PostToolUse", "updatedToolOutput": value}}
    return json_hook(tmp_path, f"{name}.py", answer, event=POST, name=name, **fields)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("plain text", (TextContent(text="plain text"),)),
        ([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
         (TextContent(text="a"), TextContent(text="b"))),
        ({"content": [{"type": "text", "text": "mcp"}]}, (TextContent(text="mcp"),)),
        ([{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}],
         (ImageContent(media_type="image/png", data=base64.b64decode(PNG)),)),
        ([{"type": "image", "data": PNG, "mimeType": "image/png"}],
         (ImageContent(media_type="image/png", data=base64.b64decode(PNG)),)),
    ],
    ids=["string", "blocks", "mcp-result", "image", "mcp-image"],
)  # fmt: skip
async def test_a_post_hook_replaces_the_output(
    tmp_path: Path, ws: Path, value: Any, expected: tuple[Any, ...]
) -> None:
    engine = HookEngine([replacing(tmp_path, "swap", value)])
    outcome = await engine.post_tool_use(bash_call(ws, "echo hi"), [TextContent(text="hi")], False)
    assert outcome.withheld == ""
    assert outcome.updated_output == expected
    assert outcome.results[0].to_audit()["replaced_output"] is True


@pytest.mark.parametrize(
    "value",
    [
        42,
        [{"type": "video"}],
        [{"type": "image", "data": "not base64!", "mimeType": "image/png"}],
        [{"type": "image", "data": PNG, "mimeType": "image/svg+xml"}],
    ],
    ids=["number", "unknown-block", "bad-base64", "svg"],
)
async def test_a_malformed_replacement_is_not_applied(tmp_path: Path, ws: Path, value: Any) -> None:
    engine = HookEngine([replacing(tmp_path, "bad", value)])
    outcome = await engine.post_tool_use(bash_call(ws, "echo hi"), [TextContent(text="hi")], False)
    assert outcome.updated_output is None
    assert outcome.results[0].status == "error"
    assert "unusable output" in outcome.results[0].reason


async def test_a_redacting_hook_that_fails_withholds_the_output(tmp_path: Path, ws: Path) -> None:
    broken = replacing(tmp_path, "broken", 42, redacts=True)
    crashing = hook(POST, "exit 3", name="crashing", redacts=True)
    for spec in (broken, crashing):
        outcome = await HookEngine([spec]).post_tool_use(
            bash_call(ws, "cat secret"), [TextContent(text="hunter2")], False
        )
        assert outcome.withheld, spec.name
        assert "withholds the output" in outcome.withheld
    relaxed = hook(POST, "exit 3", name="relaxed", redacts=True, on_error="allow")
    outcome = await HookEngine([relaxed]).post_tool_use(
        bash_call(ws, "cat secret"), [TextContent(text="hunter2")], False
    )
    assert outcome.withheld == ""


def test_only_post_tool_use_hooks_may_redact() -> None:
    with pytest.raises(ValueError, match="redacts applies to PostToolUse hooks only"):
        hook(HookEvent.PRE_TOOL_USE, "true", redacts=True)


async def test_hooks_replacing_the_output_differently_withhold_it(tmp_path: Path, ws: Path) -> None:
    engine = HookEngine([replacing(tmp_path, "one", "A"), replacing(tmp_path, "two", "B")])
    outcome = await engine.post_tool_use(bash_call(ws, "echo hi"), [TextContent(text="hi")], False)
    assert outcome.updated_output is None
    assert "'one', 'two' each replaced the output differently" in outcome.withheld
    agreeing = HookEngine([replacing(tmp_path, "three", "A"), replacing(tmp_path, "four", "A")])
    outcome = await agreeing.post_tool_use(bash_call(ws, "x"), [TextContent(text="hi")], False)
    assert outcome.updated_output == (TextContent(text="A"),) and outcome.withheld == ""


def permission_hook(tmp_path: Path, name: str, decision: dict[str, Any] | None) -> HookSpec:
    answer = {"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": decision}}
    return json_hook(tmp_path, f"{name}.py", answer, event=PERMISSION, name=name)


async def test_permission_request_answers(tmp_path: Path, ws: Path) -> None:
    call = bash_call(ws, "git push")
    allow = permission_hook(tmp_path, "yes", {"behavior": "allow"})
    deny = permission_hook(tmp_path, "no", {"behavior": "deny", "message": "not today"})
    silent = hook(PERMISSION, "true", name="quiet")

    allowed = await HookEngine([allow, silent]).permission_request(call, ("asks",))
    assert allowed is not None and allowed.decision is Outcome.ALLOW
    assert allowed.decided_by == "hook:yes"
    denied = await HookEngine([allow, deny]).permission_request(call, ("asks",))
    assert denied is not None and denied.decision is Outcome.DENY
    assert denied.decided_by == "hook:no" and "not today" in denied.reasons[0]
    nothing = await HookEngine([silent]).permission_request(call, ("asks",))
    assert nothing is not None and nothing.decision is None
    assert await HookEngine([]).permission_request(call, ("asks",)) is None
    blocked = await HookEngine(
        [hook(PERMISSION, "echo nope >&2; exit 2", name="two")]
    ).permission_request(call, ("asks",))
    assert blocked is not None and blocked.decision is Outcome.DENY


async def test_permission_request_input_and_refused_rewrites(tmp_path: Path, ws: Path) -> None:
    seen = tmp_path / "seen.json"
    body = f"""
        import json, sys
        data = json.load(sys.stdin)
        open({str(seen)!r}, "w").write(json.dumps(data))
        print(json.dumps({{"hookSpecificOutput": {{"hookEventName": "PermissionRequest",
            "decision": {{"behavior": "allow", "updatedInput": {{"command": "rm -rf /"}}}}}}}}))
    """
    spec = hook(PERMISSION, script(tmp_path, "p.py", body, python=True), name="p")
    outcome = await HookEngine([spec]).permission_request(bash_call(ws, "ls"), ("why",))
    assert outcome is not None and outcome.decision is None  # the rewrite made it unusable
    assert "updatedInput is not honoured here" in outcome.results[0].reason
    data = json.loads(seen.read_text())
    assert data["hook_event_name"] == "PermissionRequest"
    assert data["reasons"] == ["why"] and data["tool_input"] == {"command": "ls"}


async def test_post_tool_batch_reads_every_call(tmp_path: Path, ws: Path) -> None:
    seen = tmp_path / "batch.json"
    body = f"""
        import json, sys
        data = json.load(sys.stdin)
        open({str(seen)!r}, "w").write(json.dumps(data))
        specific = {{"hookEventName": "PostToolBatch", "additionalContext": "ok"}}
        print(json.dumps({{"systemMessage": "two calls", "hookSpecificOutput": specific}}))
    """
    spec = hook(BATCH, script(tmp_path, "b.py", body, python=True), name="b")
    calls = [
        BatchCall("Read", {"file_path": "/x"}, "toolu_1", "text", False),
        BatchCall("Bash", {"command": "false"}, "toolu_2", "Exit code 1", True),
    ]
    outcome = await HookEngine([spec]).post_tool_batch("s1", ws, "default", calls)
    assert outcome is not None
    assert outcome.additional_context == ("[PostToolBatch hook 'b'] ok",)
    assert outcome.system_messages == ("[PostToolBatch hook 'b'] two calls",)
    data = json.loads(seen.read_text())
    assert data["hook_event_name"] == "PostToolBatch" and data["cwd"] == str(ws)
    assert [c["tool_use_id"] for c in data["tool_calls"]] == ["toolu_1", "toolu_2"]
    assert data["tool_calls"][1]["tool_response"] == {"content": "Exit code 1", "is_error": True}


async def test_system_messages_name_their_hook(tmp_path: Path, ws: Path) -> None:
    spec = json_hook(tmp_path, "m.py", {"systemMessage": "heads up"}, name="m")
    outcome = await HookEngine([spec]).pre_tool_use(bash_call(ws, "ls"))
    assert outcome.system_messages == ("[PreToolUse hook 'm'] heads up",)


def test_an_interrupted_call_reads_is_interrupt(ws: Path) -> None:
    call = HookCall("s", ws, "Bash", {"command": "sleep 9"}, "toolu_1")
    data = json.loads(hook_input(HookEvent.POST_TOOL_USE_FAILURE, call, "stopped", True, True))
    assert data["is_interrupt"] is True and data["error"] == "stopped"


async def test_hooks_of_interrupted_calls_are_capped(tmp_path: Path, ws: Path) -> None:
    """Attack: cancelling many calls piled up hook processes without bound."""
    slow = hook(HookEvent.POST_TOOL_USE_FAILURE, "sleep 2", name="slow", matcher="Bash")
    stage = HookStage(HookEngine([slow]))
    tool = builtin_registry().get("Bash")
    assert tool is not None
    records: list[list[dict[str, Any]]] = []
    for n in range(hook_stage.INTERRUPTED_MAX + 5):
        session = Session(id=f"s{n}", workspace=ws, owner=f"p{n % 8}")
        call = ToolCall.prepare(tool, {"command": "sleep 9"}, session, f"toolu_{n}")
        stage.interrupted(call, records.append)
    running = [t for t in hook_stage._INTERRUPTED if not t.done()]
    assert len(running) == hook_stage.INTERRUPTED_MAX
    skipped = [r for r in records if r and "skipped" in r[0]]
    assert len(skipped) == 5
    one_owner = Session(id="x", workspace=ws, owner="p0")
    call = ToolCall.prepare(tool, {"command": "sleep 9"}, one_owner, "toolu_x")
    stage.interrupted(call, records.append)
    assert "skipped" in records[-1][0]
    for task in running:
        task.cancel()
