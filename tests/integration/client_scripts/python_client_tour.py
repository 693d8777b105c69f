"""Run inside a virtualenv that has only tooljail-client: every feature of the client against a
live daemon; prints one JSON object of what it saw (the test asserts on it)."""

import asyncio
import importlib.util
import json
import sys

import tooljail
from tooljail.anthropic import next_user_message

target, workspace = sys.argv[1], sys.argv[2]
seen = {"daemon_importable": importlib.util.find_spec("daemon") is not None}
seen["docker_importable"] = importlib.util.find_spec("docker") is not None

with tooljail.Client(target, timeout=120) as jail:
    tools = jail.list_tools()
    seen["tools"] = sorted(t.name for t in tools)
    seen["strict_write"] = next(t for t in tools if t.name == "Write").anthropic.get("strict")
    read = jail.execute("Read", {"file_path": f"{workspace}/hello.txt"})
    seen["read"] = [read.is_error, read.text, read.decision.outcome]
    events = list(
        jail.stream("Bash", {"command": "for i in 1 2 3; do echo step $i; sleep 0.4; done"})
    )
    seen["stream_kinds"] = [type(e).__name__ for e in events]
    seen["stream_last"] = events[-1].text if isinstance(events[-1], tooljail.Answer) else ""
    batch = jail.execute_batch(
        [
            {
                "type": "tool_use",
                "id": "toolu_b1",
                "name": "Bash",
                "input": {"command": "echo one"},
            },
            {"type": "text", "text": "ignored"},
            {"type": "tool_use", "id": "toolu_b2", "name": "LS", "input": {"path": workspace}},
        ]
    )
    seen["batch_ids"] = [a.tool_use_id for a in batch]
    message = {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "let me look"},
            {
                "type": "tool_use",
                "id": "toolu_m1",
                "name": "Bash",
                "input": {"command": "echo via loop"},
            },
        ],
    }
    seen["next_user_message"] = next_user_message(jail, message)
    denied = jail.execute("Bash", {"command": "sudo id"})
    seen["denied"] = [denied.is_error, denied.decision.outcome]
    asked = jail.execute(
        "Bash", {"command": "git push --force origin main"}, tool_use_id="toolu_ask1"
    )
    seen["asked"] = [asked.decision.outcome, bool(asked.decision.approval_token)]
    pending = [a for a in jail.pending_approvals() if a.tool_use_id == "toolu_ask1"]
    jail.approve(pending[0].approval_id)
    again = jail.execute(
        "Bash",
        {"command": "git push --force origin main"},
        tool_use_id="toolu_ask1",
        approval_token=asked.decision.approval_token,
    )
    seen["approved"] = again.decision.outcome
    session = jail.open_session()
    in_session = jail.execute("Bash", {"command": "pwd"}, session_id=session.id)
    seen["session"] = [in_session.text.strip() == session.workspace, session.mode]
    jail.close_session(session.id)
    try:
        jail.execute("Bash", {"command": "pwd"}, session_id=session.id)
        seen["closed"] = "no error"
    except tooljail.NotFound as error:
        seen["closed"] = type(error).__name__
    replay1 = jail.execute("Bash", {"command": "date +%s%N"}, tool_use_id="toolu_once")
    replay2 = jail.execute("Bash", {"command": "date +%s%N"}, tool_use_id="toolu_once")
    seen["ran_once"] = replay1.text == replay2.text
    seen["status_version"] = bool(jail.status().version)

try:
    tooljail.Client("unix:///nonexistent/tooljail.sock", timeout=2).list_tools()
except tooljail.TooljailError as error:
    seen["unreachable"] = type(error).__name__


async def _async_tour() -> dict[str, object]:
    from tooljail.aio import AsyncClient

    async with AsyncClient(target, timeout=120) as jail:
        session = await jail.open_session()
        answer = await jail.execute("Bash", {"command": "echo async"}, session_id=session.id)
        kinds = [
            type(e).__name__ async for e in jail.stream("Bash", {"command": "sleep 0.3; echo s"})
        ]
        batch = await jail.execute_batch(
            [{"id": "toolu_a1", "name": "Bash", "input": {"command": "echo x"}}],
            session_id=session.id,
        )
        streamed = [
            type(e).__name__ + ":" + e.tool_use_id
            async for e in jail.stream_batch(
                [
                    {"id": "toolu_s1", "name": "Bash", "input": {"command": "sleep 0.3; echo 1"}},
                    {"id": "toolu_s2", "name": "Bash", "input": {"command": "echo 2"}},
                ],
                session_id=session.id,
            )
        ]
        await jail.close_session(session.id, delete_workspace=True)
    answers = [e for e in streamed if e.startswith("Answer:")]
    return {
        "text": answer.text,
        "last": kinds[-1],
        "batch": [a.tool_use_id for a in batch],
        "stream_batch_answers": answers,
    }


seen["async"] = asyncio.run(_async_tour())
print(json.dumps(seen))
