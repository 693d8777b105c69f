"""The asyncio client: the same calls as `Client`, awaited.

from tooljail.aio import AsyncClient

async with AsyncClient() as jail:
    answer = await jail.execute("Glob", {"pattern": "**/*.py"})
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterable, Mapping
from types import TracebackType
from typing import Any

import grpc

from tooljail import types
from tooljail._proto.tooljail.v1 import executor_pb2 as pb
from tooljail._proto.tooljail.v1 import executor_pb2_grpc as pb_grpc
from tooljail.client import RETRIES, RETRY_PAUSE_S
from tooljail.connection import Connection
from tooljail.errors import Unavailable, from_rpc_error
from tooljail.requests import ToolUseLike, new_tool_use_id, tool_use, tool_uses


class AsyncClient:
    """A connection to a tooljail daemon for asyncio programs (arguments as `Client`'s)."""

    def __init__(
        self,
        target: str | None = None,
        *,
        token: str | None = None,
        ca_file: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
        timeout: float | None = 300.0,
        retries: int = RETRIES,
    ) -> None:
        if retries < 0:
            raise ValueError(f"retries must be 0 or more, not {retries}")
        self.connection = Connection.resolve(
            target, token=token, ca_file=ca_file, cert_file=cert_file, key_file=key_file
        )
        self._channel = self.connection.aio_channel()
        self._executor = pb_grpc.ExecutorStub(self._channel)
        self._admin = pb_grpc.AdminStub(self._channel)
        self._timeout = timeout
        self._attempts = retries + 1

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self.close()

    def _options(self, timeout: float | None) -> dict[str, Any]:
        return {"timeout": self._timeout if timeout is None else timeout}

    async def list_tools(self, session_id: str = "") -> list[types.ToolDefinition]:
        """The tools this caller may use (in the session)."""
        request = pb.ListToolsRequest(session_id=session_id)
        response = await _call(self._executor.ListTools(request, **self._options(None)))
        anthropic = {tool["name"]: tool for tool in json.loads(response.tools_json or "[]")}
        return [types.tool_definition(t, anthropic.get(t.name, {})) for t in response.tools]

    async def execute(
        self,
        name: str,
        tool_input: Mapping[str, Any] | None = None,
        *,
        tool_use_id: str | None = None,
        session_id: str = "",
        approval_token: str = "",
        timeout: float | None = None,
    ) -> types.Answer:
        """Run one tool_use (retried with the same id when the daemon could not be reached)."""
        use = tool_use({"id": tool_use_id or new_tool_use_id(), "name": name, "input": tool_input})
        request = pb.ExecuteRequest(
            tool_use=use, session_id=session_id, approval_token=approval_token
        )
        for attempt in range(self._attempts):
            try:
                call = self._executor.Execute(request, **self._options(timeout))
                return types.answer(await _call(call))
            except Unavailable:
                if attempt == self._attempts - 1:
                    raise
                await asyncio.sleep(RETRY_PAUSE_S * (attempt + 1))
        raise AssertionError("unreachable")

    async def execute_batch(
        self, blocks: Iterable[ToolUseLike], *, session_id: str = "", timeout: float | None = None
    ) -> list[types.Answer]:
        """The tool_use blocks of one assistant turn, answered in their order."""
        request = pb.ExecuteBatchRequest(session_id=session_id, tool_uses=tool_uses(blocks))
        try:
            stream = self._executor.ExecuteBatch(request, **self._options(timeout))
            return [types.answer(message) async for message in stream]
        except grpc.RpcError as error:
            raise from_rpc_error(error) from None

    async def stream(
        self,
        name: str,
        tool_input: Mapping[str, Any] | None = None,
        *,
        session_id: str = "",
        timeout: float | None = None,
    ) -> AsyncIterator[types.Progress | types.Answer]:
        """One call with its live progress; the answer comes last."""
        use = tool_use({"id": new_tool_use_id(), "name": name, "input": tool_input})
        request = pb.ExecuteRequest(tool_use=use, session_id=session_id)
        async for event in _events(self._executor.ExecuteStream(request, **self._options(timeout))):
            yield event

    async def stream_batch(
        self, blocks: Iterable[ToolUseLike], *, session_id: str = "", timeout: float | None = None
    ) -> AsyncIterator[types.Progress | types.Answer]:
        """A batch with every call's progress between the (ordered) answers."""
        request = pb.ExecuteBatchRequest(session_id=session_id, tool_uses=tool_uses(blocks))
        stream = self._executor.ExecuteBatchStream(request, **self._options(timeout))
        async for event in _events(stream):
            yield event

    async def open_session(
        self, workspace: str = "", *, mode: str = "", idle_ttl_s: int = 0
    ) -> types.Session:
        """A session: over `workspace` (when the policy allows it) or a fresh directory."""
        request = pb.OpenSessionRequest(workspace=workspace, mode=mode, idle_ttl_s=idle_ttl_s)
        return types.session(
            await _call(self._executor.OpenSession(request, **self._options(None)))
        )

    async def close_session(self, session_id: str, *, delete_workspace: bool = False) -> int:
        """Close it (its calls are cancelled, its containers go); how many calls were running."""
        request = pb.CloseSessionRequest(session_id=session_id, delete_workspace=delete_workspace)
        closed = await _call(self._executor.CloseSession(request, **self._options(None)))
        return int(closed.cancelled_calls)

    async def set_session_mode(self, session_id: str, mode: str) -> types.Session:
        request = pb.SetSessionModeRequest(session_id=session_id, mode=mode)
        return types.session(
            await _call(self._admin.SetSessionMode(request, **self._options(None)))
        )

    async def pending_approvals(self) -> list[pb.PendingApproval]:
        """The asks waiting for an approver (the caller must be one)."""
        request = pb.ListPendingApprovalsRequest()
        response = await _call(self._admin.ListPendingApprovals(request, **self._options(None)))
        return list(response.approvals)

    async def approve(self, approval_id: str, *, scope: str = "once", note: str = "") -> None:
        request = pb.AnswerApprovalRequest(approval_id=approval_id, scope=scope, note=note)
        await _call(self._admin.Approve(request, **self._options(None)))

    async def deny(self, approval_id: str, *, note: str = "") -> None:
        request = pb.AnswerApprovalRequest(approval_id=approval_id, note=note)
        await _call(self._admin.Deny(request, **self._options(None)))

    async def status(self) -> pb.StatusResponse:
        """The daemon's health."""
        response: pb.StatusResponse = await _call(
            self._admin.Status(pb.StatusRequest(), **self._options(None))
        )
        return response


async def _events(stream: Any) -> AsyncIterator[types.Progress | types.Answer]:
    """A stream's events as progress and answers (RPC failures as TooljailError)."""
    try:
        async for message in stream:
            if (event := types.event(message)) is not None:
                yield event
    except grpc.RpcError as error:
        raise from_rpc_error(error) from None


async def _call(call: Any) -> Any:
    try:
        return await call
    except grpc.RpcError as error:
        raise from_rpc_error(error) from None
