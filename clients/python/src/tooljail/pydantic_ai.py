"""pydantic-ai: the daemon's tools as a toolset (`pip install 'tooljail-client[pydantic-ai]'`).

    from pydantic_ai import Agent, DeferredToolRequests
    from tooljail.aio import AsyncClient
    from tooljail.pydantic_ai import TooljailToolset

    jail = AsyncClient()
    agent = Agent("anthropic:claude-sonnet-4-5", toolsets=[TooljailToolset(jail)],
                  output_type=[str, DeferredToolRequests])

The tools and their schemas are ListTools' (what the policy lets this caller see); a call goes
through Execute with the framework's tool call id as the tool_use id, so a retried run is not run
twice. A policy ask becomes the framework's approval: the run ends with `DeferredToolRequests`
whose `approvals` hold the call and whose `metadata` hold the daemon's reasons; run again with
`DeferredToolResults(approvals={id: True})` and the call goes back with its approval token. A
refused or failed call (`is_error`) is a `ModelRetry`: the model sees the daemon's message.
"""

from __future__ import annotations

from typing import Any

from pydantic_ai import ApprovalRequired, BinaryContent, ModelRetry, RunContext
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import AbstractToolset, ToolsetTool
from pydantic_core import SchemaValidator, core_schema

from tooljail.aio import AsyncClient
from tooljail.types import Answer

_ANY_ARGUMENTS = SchemaValidator(core_schema.dict_schema(core_schema.str_schema()))
"""The daemon validates the input against the tool's schema itself, and says what is wrong."""

TOKEN_KEY = "approval_token"  # noqa: S105 - a key's name
"""Where an ask's approval token is in the call's deferred metadata."""


class TooljailToolset(AbstractToolset[Any]):
    """The tools of a tooljail daemon, called through it.

    Args:
        client: The daemon's asyncio client.
        session_id: The session the calls run in ("" for the caller's default session).
        tool_names: Only these of the daemon's tools (default: every tool the policy shows).
        max_retries: How often the model may try again after an `is_error` answer.
        toolset_id: The toolset's id, for durable execution.
    """

    def __init__(
        self,
        client: AsyncClient,
        *,
        session_id: str = "",
        tool_names: set[str] | None = None,
        max_retries: int = 2,
        toolset_id: str | None = None,
    ) -> None:
        self._client = client
        self._session_id = session_id
        self._tool_names = tool_names
        self._max_retries = max_retries
        self._id = toolset_id
        self._asked: dict[str, str] = {}
        """Approval tokens of asked calls by tool call id, for when the approval comes back
        without the metadata."""

    @property
    def id(self) -> str | None:
        return self._id

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        tools = await self._client.list_tools(self._session_id)
        return {
            tool.name: ToolsetTool(
                toolset=self,
                tool_def=ToolDefinition(
                    name=tool.name,
                    description=tool.description,
                    parameters_json_schema=tool.input_schema,
                    strict=bool(tool.anthropic.get("strict")) or None,
                    sequential=not tool.concurrency_safe,
                ),
                max_retries=self._max_retries,
                args_validator=_ANY_ARGUMENTS,
            )
            for tool in tools
            if self._tool_names is None or tool.name in self._tool_names
        }

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        call_id = ctx.tool_call_id
        if not call_id:
            raise ValueError("tooljail needs the tool call id: it is the call's tool_use id")
        token = ""
        if ctx.tool_call_approved:
            metadata = ctx.tool_call_metadata if isinstance(ctx.tool_call_metadata, dict) else {}
            token = str(metadata.get(TOKEN_KEY) or self._asked.get(call_id, ""))
        answer = await self._client.execute(
            name,
            tool_args,
            tool_use_id=call_id,
            session_id=self._session_id,
            approval_token=token,
        )
        if answer.decision.outcome == "ask":
            self._asked[call_id] = answer.decision.approval_token
            raise ApprovalRequired(
                metadata={
                    TOKEN_KEY: answer.decision.approval_token,
                    "reasons": list(answer.decision.reasons),
                }
            )
        self._asked.pop(call_id, None)
        if answer.is_error:
            raise ModelRetry(answer.text)
        return content(answer)


def content(answer: Answer) -> str | list[str | BinaryContent]:
    """The answer as a pydantic-ai tool return: its text, and its images as binary content."""
    if not answer.images:
        return answer.text
    parts: list[str | BinaryContent] = [answer.text] if answer.text else []
    parts.extend(BinaryContent(data=data, media_type=media) for media, data in answer.images)
    return parts
