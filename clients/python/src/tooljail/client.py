"""The blocking client: one object per daemon, one method per RPC.

    from tooljail import Client

    with Client() as jail:                      # TOOLJAIL_TARGET, or the default socket
        answer = jail.execute("Read", {"file_path": "/srv/ws/README.md"})
        print(answer.text)

Execute is idempotent by its tool_use id: the daemon runs a given id once and answers a retry
with the first answer, so `execute` retries a call that could not reach the daemon (UNAVAILABLE)
with the same id, and you may too.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Mapping
from types import TracebackType
from typing import Any

import grpc
from google.protobuf import json_format

from tooljail import types
from tooljail._proto.tooljail.v1 import executor_pb2 as pb
from tooljail._proto.tooljail.v1 import executor_pb2_grpc as pb_grpc
from tooljail.connection import Connection
from tooljail.errors import TooljailError, Unavailable, from_rpc_error
from tooljail.requests import ToolUseLike, new_tool_use_id, tool_use, tool_uses

RETRIES = 2
"""Retries of an Execute that could not reach the daemon (same tool_use id each time)."""
RETRY_PAUSE_S = 0.5


class Client:
    """A connection to a tooljail daemon.

    Args:
        target: `unix:///path` or `host:port` (default: TOOLJAIL_TARGET, else the packaged
            service's socket).
        token: Bearer token for a TCP listener (default: TOOLJAIL_TOKEN).
        ca_file, cert_file, key_file: TLS roots, and the client's certificate for mTLS.
        timeout: Default deadline of each call, in seconds (None: none).
        retries: How often `execute` sends a call again, with the same tool_use id, when the
            daemon could not be reached (UNAVAILABLE). The daemon runs an id once and answers a
            retry with the first answer; but a daemon that restarted has forgotten, and a call
            cut short by the restart runs again. 0 turns retries off.
    """

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
        self._channel = self.connection.channel()
        self._executor = pb_grpc.ExecutorStub(self._channel)
        self._admin = pb_grpc.AdminStub(self._channel)
        self._timeout = timeout
        self._attempts = retries + 1

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    def _options(self, timeout: float | None) -> dict[str, Any]:
        return {"timeout": self._timeout if timeout is None else timeout}

    # --- tools --------------------------------------------------------------------------------

    def list_tools(
        self, session_id: str = "", *, include_deferred: bool = False, timeout: float | None = None
    ) -> list[types.ToolDefinition]:
        """The tools this caller may use (in the session), as the policy shows them."""
        request = pb.ListToolsRequest(session_id=session_id, include_deferred=include_deferred)
        response = _call(self._executor.ListTools, request, **self._options(timeout))
        anthropic = {tool["name"]: tool for tool in json.loads(response.tools_json or "[]")}
        return [types.tool_definition(t, anthropic.get(t.name, {})) for t in response.tools]

    def anthropic_tools(self, session_id: str = "") -> list[dict[str, Any]]:
        """The tools as `messages.create(tools=...)` takes them."""
        return [tool.anthropic for tool in self.list_tools(session_id)]

    # --- calls --------------------------------------------------------------------------------

    def execute(
        self,
        name: str,
        tool_input: Mapping[str, Any] | None = None,
        *,
        tool_use_id: str | None = None,
        session_id: str = "",
        approval_token: str = "",
        approval_scope: str = "",
        turn_id: str = "",
        timeout: float | None = None,
    ) -> types.Answer:
        """Run one tool_use; a refused or failed call is an answer whose `is_error` is set."""
        use = tool_use({"id": tool_use_id or new_tool_use_id(), "name": name, "input": tool_input})
        request = pb.ExecuteRequest(
            tool_use=use,
            session_id=session_id,
            approval_token=approval_token,
            approval_scope=approval_scope,
            turn_id=turn_id,
        )
        options = self._options(timeout)
        for attempt in range(self._attempts):
            try:
                return types.answer(_call(self._executor.Execute, request, **options))
            except Unavailable:
                if attempt == self._attempts - 1:
                    raise
                time.sleep(RETRY_PAUSE_S * (attempt + 1))  # same id: it runs once
        raise AssertionError("unreachable")

    def execute_tool_use(
        self, block: ToolUseLike, *, session_id: str = "", timeout: float | None = None
    ) -> types.Answer:
        """Run a tool_use block as the model wrote it (its id is kept)."""
        use = tool_use(block)
        return self.execute(
            use.name,
            _plain(use.input),
            tool_use_id=use.id,
            session_id=session_id,
            timeout=timeout,
        )

    def execute_batch(
        self, blocks: Iterable[ToolUseLike], *, session_id: str = "", timeout: float | None = None
    ) -> list[types.Answer]:
        """The tool_use blocks of one assistant turn, run as the reference runtime runs them
        (safe ones in parallel), answered in their order."""
        request = pb.ExecuteBatchRequest(session_id=session_id, tool_uses=tool_uses(blocks))
        try:
            stream = self._executor.ExecuteBatch(request, **self._options(timeout))
            return [types.answer(message) for message in stream]
        except grpc.RpcError as error:
            raise from_rpc_error(error) from None

    def stream(
        self,
        name: str,
        tool_input: Mapping[str, Any] | None = None,
        *,
        tool_use_id: str | None = None,
        session_id: str = "",
        timeout: float | None = None,
    ) -> Iterator[types.Progress | types.Answer]:
        """One call with its live progress; the answer comes last."""
        use = tool_use({"id": tool_use_id or new_tool_use_id(), "name": name, "input": tool_input})
        request = pb.ExecuteRequest(tool_use=use, session_id=session_id)
        yield from _events(self._executor.ExecuteStream(request, **self._options(timeout)))

    def stream_batch(
        self, blocks: Iterable[ToolUseLike], *, session_id: str = "", timeout: float | None = None
    ) -> Iterator[types.Progress | types.Answer]:
        """A batch with every call's progress between the (ordered) answers."""
        request = pb.ExecuteBatchRequest(session_id=session_id, tool_uses=tool_uses(blocks))
        yield from _events(self._executor.ExecuteBatchStream(request, **self._options(timeout)))

    # --- sessions -----------------------------------------------------------------------------

    def open_session(
        self, workspace: str = "", *, mode: str = "", idle_ttl_s: int = 0
    ) -> types.Session:
        """A session: over `workspace` (when the policy allows it) or a fresh directory."""
        request = pb.OpenSessionRequest(workspace=workspace, mode=mode, idle_ttl_s=idle_ttl_s)
        return types.session(_call(self._executor.OpenSession, request, **self._options(None)))

    def close_session(self, session_id: str, *, delete_workspace: bool = False) -> int:
        """Close it (its calls are cancelled, its containers go); how many calls were running."""
        request = pb.CloseSessionRequest(session_id=session_id, delete_workspace=delete_workspace)
        closed = _call(self._executor.CloseSession, request, **self._options(None))
        return int(closed.cancelled_calls)

    def set_session_mode(self, session_id: str, mode: str) -> types.Session:
        request = pb.SetSessionModeRequest(session_id=session_id, mode=mode)
        return types.session(_call(self._admin.SetSessionMode, request, **self._options(None)))

    # --- approvals and status -----------------------------------------------------------------

    def pending_approvals(self) -> list[pb.PendingApproval]:
        """The asks waiting for an approver (the caller must be one)."""
        request = pb.ListPendingApprovalsRequest()
        response = _call(self._admin.ListPendingApprovals, request, **self._options(None))
        return list(response.approvals)

    def approve(self, approval_id: str, *, scope: str = "once", note: str = "") -> None:
        """Approve an ask; its caller then resends the call with its approval token."""
        request = pb.AnswerApprovalRequest(approval_id=approval_id, scope=scope, note=note)
        _call(self._admin.Approve, request, **self._options(None))

    def deny(self, approval_id: str, *, note: str = "") -> None:
        request = pb.AnswerApprovalRequest(approval_id=approval_id, note=note)
        _call(self._admin.Deny, request, **self._options(None))

    def status(self) -> pb.StatusResponse:
        """The daemon's health (version, policy revision, OPA and Docker, sessions)."""
        response: pb.StatusResponse = _call(
            self._admin.Status, pb.StatusRequest(), **self._options(None)
        )
        return response


def _call(method: Any, request: Any, **options: Any) -> Any:
    try:
        return method(request, **options)
    except grpc.RpcError as error:
        raise from_rpc_error(error) from None


def _events(stream: Iterable[pb.ExecuteEvent]) -> Iterator[types.Progress | types.Answer]:
    try:
        for message in stream:
            if (event := types.event(message)) is not None:
                yield event
    except grpc.RpcError as error:
        raise from_rpc_error(error) from None


def _plain(value: Any) -> dict[str, Any]:
    plain: dict[str, Any] = json_format.MessageToDict(value)
    return plain


__all__ = ["Client", "TooljailError"]
