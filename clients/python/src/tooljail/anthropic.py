"""The Anthropic Messages API loop: the tools for `messages.create(tools=...)`, and an assistant
message's tool_use blocks turned into the next user message of tool_result blocks, through one
ExecuteBatch. Works on the SDK's objects and on plain dicts alike (no anthropic import).

    import anthropic, tooljail
    from tooljail.anthropic import next_user_message

    claude, jail = anthropic.Anthropic(), tooljail.Client()
    session = jail.open_session()
    tools = jail.anthropic_tools(session.id)
    messages = [{"role": "user", "content": "Count the lines of README.md"}]
    while True:
        reply = claude.messages.create(model=MODEL, max_tokens=4096, tools=tools, messages=messages)
        messages.append({"role": "assistant", "content": reply.content})
        if reply.stop_reason != "tool_use":
            break
        messages.append(next_user_message(jail, reply, session_id=session.id))
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tooljail.client import Client


def tool_use_blocks(message: Any) -> list[Any]:
    """The tool_use blocks of an assistant message (an SDK Message, a dict, or its content)."""
    if isinstance(message, Mapping):
        content = message.get("content", [])
    else:
        content = getattr(message, "content", message)
    blocks: Iterable[Any] = [] if isinstance(content, str) else content
    return [b for b in blocks if _type(b) == "tool_use"]


def next_user_message(client: Client, message: Any, *, session_id: str = "") -> dict[str, Any]:
    """The user message answering every tool_use of `message`, in their order (refused and
    failed calls are tool_result blocks with is_error, as the model expects them)."""
    answers = client.execute_batch(tool_use_blocks(message), session_id=session_id)
    return {"role": "user", "content": [answer.tool_result for answer in answers]}


def _type(block: Any) -> Any:
    return block.get("type") if isinstance(block, Mapping) else getattr(block, "type", None)
