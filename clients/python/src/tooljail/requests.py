"""Building requests: tool_use blocks (dicts as the Messages API has them) to protobuf."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from tooljail._proto.tooljail.v1 import executor_pb2 as pb

ToolUseLike = Mapping[str, Any] | Any
"""A tool_use block: a dict ({"id", "name", "input"}) or an object with those attributes (the
Anthropic SDK's ToolUseBlock)."""


def new_tool_use_id() -> str:
    """A fresh id: resending a call with the same id never runs it twice."""
    return f"toolu_{uuid.uuid4().hex[:24]}"


def tool_use(block: ToolUseLike) -> pb.ToolUse:
    """A tool_use block as protobuf (a fresh id when it has none)."""
    if isinstance(block, Mapping):
        tool_id, name, arguments = block.get("id"), block["name"], block.get("input") or {}
    else:
        tool_id, name, arguments = getattr(block, "id", None), block.name, block.input or {}
    message = pb.ToolUse(id=str(tool_id or new_tool_use_id()), name=str(name))
    message.input.update(dict(arguments))
    return message


def tool_uses(blocks: Iterable[ToolUseLike]) -> list[pb.ToolUse]:
    """The tool_use blocks of a list of content blocks (other block types are skipped)."""
    found = []
    for block in blocks:
        kind = block.get("type") if isinstance(block, Mapping) else getattr(block, "type", None)
        if kind in (None, "tool_use"):
            found.append(tool_use(block))
    return found
