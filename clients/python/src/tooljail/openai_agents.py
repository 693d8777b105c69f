"""OpenAI Agents SDK: the daemon's tools as function tools (`tooljail-client[openai-agents]`).

    from agents import Agent, Runner
    from tooljail.aio import AsyncClient
    from tooljail.openai_agents import function_tools

    jail = AsyncClient()
    agent = Agent(name="coder", tools=await function_tools(jail))

Each tool is one the policy shows this caller (ListTools); a call goes through Execute with the
SDK's call id as the tool_use id. The input is validated by the daemon, which says what is wrong.
A refused or failed call comes back to the model as text starting with "Error:". A policy ask is
put to `approve` when one is given (a person's answer, in the program's own way): on yes the call
goes back with its approval token; otherwise the model is told that a person must approve it.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Awaitable, Callable, Collection
from typing import Any

from agents import FunctionTool, ToolOutputImage, ToolOutputText
from agents.tool_context import ToolContext

from tooljail.aio import AsyncClient
from tooljail.types import Answer, ToolDefinition

Approver = Callable[[str, dict[str, Any], tuple[str, ...]], Awaitable[bool]]
"""Asked when the policy wants a person: (tool name, input, the policy's reasons) -> approved."""

ToolOutput = str | list[ToolOutputText | ToolOutputImage]


async def function_tools(
    client: AsyncClient,
    *,
    session_id: str = "",
    tool_names: Collection[str] | None = None,
    approve: Approver | None = None,
) -> list[FunctionTool]:
    """Function tools for the daemon's tools (all the policy shows, or only `tool_names`)."""
    tools = await client.list_tools(session_id)
    return [
        _function_tool(client, tool, session_id, approve)
        for tool in tools
        if tool_names is None or tool.name in tool_names
    ]


def _function_tool(
    client: AsyncClient, tool: ToolDefinition, session_id: str, approve: Approver | None
) -> FunctionTool:
    async def invoke(ctx: ToolContext[Any], arguments: str) -> ToolOutput:
        try:
            tool_input = json.loads(arguments or "{}")
        except json.JSONDecodeError as error:
            return f"Error: the arguments are not JSON ({error}); send a JSON object."
        if not isinstance(tool_input, dict):
            return "Error: the arguments must be a JSON object."
        answer = await client.execute(
            tool.name, tool_input, tool_use_id=ctx.tool_call_id, session_id=session_id
        )
        if answer.decision.outcome == "ask":
            reasons = answer.decision.reasons
            if approve is None or not await approve(tool.name, tool_input, reasons):
                return "Error: a person must approve this call, and did not: " + "; ".join(reasons)
            answer = await client.execute(
                tool.name,
                tool_input,
                tool_use_id=ctx.tool_call_id,
                session_id=session_id,
                approval_token=answer.decision.approval_token,
            )
        return output(answer)

    return FunctionTool(
        name=tool.name,
        description=tool.description,
        params_json_schema=tool.input_schema,
        on_invoke_tool=invoke,
        # The SDK's strict mode rewrites the schema (every property required): the model would
        # see another contract than the daemon's.
        strict_json_schema=False,
    )


def output(answer: Answer) -> ToolOutput:
    """The answer as a function tool's output: its text (marked when an error) and its images."""
    text = f"Error: {answer.text}" if answer.is_error else answer.text
    if not answer.images:
        return text
    parts: list[ToolOutputText | ToolOutputImage] = [ToolOutputText(text=text)] if text else []
    parts.extend(
        ToolOutputImage(image_url=f"data:{media};base64,{base64.b64encode(data).decode()}")
        for media, data in answer.images
    )
    return parts
