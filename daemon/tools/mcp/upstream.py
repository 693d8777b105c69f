"""One upstream MCP server: a connection kept open in the background, its tools, its calls.

The connection lives in a task of its own (the SDK's client must be entered and left in one
task). When it cannot be made, or breaks (a call finds the transport gone, the server says so),
the task reconnects with a growing backoff; meanwhile calls fail at once with a result naming the
server, and the server's tools stay listed (a brief outage does not reshuffle the model's tools).
A `tools/list_changed` notification re-reads the listing. A call that takes longer than the
server's timeout fails on its own; no call waits for another.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import mcp_types as types
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError

from daemon.errors import ToolError
from daemon.tools.contract import CallContext, ProgressUpdate
from daemon.tools.mcp.config import McpServerSpec
from daemon.tools.mcp.http_client import MAX_MESSAGE_BYTES, capped_http_client

log = logging.getLogger(__name__)

_BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
_RELIST_PAUSE_S = 1.0
_RECONNECT_WAIT_S = 5.0
"""A call that finds the connection being made again (a call just broke it) waits this long for
it, at most its own timeout, before it fails as "not connected"."""
_RECONNECT_POLL_S = 0.02
MAX_LISTED_TOOLS = 512
"""Tools taken from one server; more are ignored (logged)."""
MAX_LISTING_PAGES = 20
"""Pages of a listing read; a server with more is read that far (logged)."""
MAX_LISTING_BYTES = 8 << 20
"""What the tools of one server may hold together (names, descriptions, schemas as JSON)."""

ToolsListener = Callable[[str, list[types.Tool]], None]
"""Told the server's name and its tools whenever they were (re)read."""


@dataclass(frozen=True)
class McpAnswer:
    """What a server answered a call, and where it ran."""

    result: types.CallToolResult
    sandbox_id: str = ""
    """The container it ran in (stdio servers), empty for a server of its own."""


class Upstream(Protocol):
    """An upstream server as its tools use it (over HTTP, or stdio in the sandbox)."""

    spec: McpServerSpec

    async def call(
        self, tool: str, arguments: dict[str, Any], ctx: CallContext | None = None
    ) -> McpAnswer:
        """Call `tool` (the server's own name); McpServerError naming the server on failure."""
        ...


class McpServerError(ToolError):
    """A call to an upstream server failed; the message names the server and says why."""


class McpUpstream:
    """The connection to one server."""

    def __init__(self, spec: McpServerSpec, on_tools: ToolsListener) -> None:
        self.spec = spec
        self._on_tools = on_tools
        self._client: Client | None = None
        self._broken = asyncio.Event()
        self._relist = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.connected = asyncio.Event()
        """Set while a connection is up (tests and status wait on it)."""
        self.failures = 0
        """Connection attempts that failed in a row."""
        self.last_error = ""

    def start(self) -> None:
        """Connect in the background (and keep reconnecting)."""
        self._task = asyncio.create_task(self._run(), name=f"mcp-{self.spec.name}")

    async def stop(self) -> None:
        """Close the connection and stop reconnecting."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    async def _run(self) -> None:
        while True:
            try:
                await self._connection()
                self.failures = 0
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # noqa: BLE001 - any failure means: reconnect later
                self.failures += 1
                self.last_error = _describe(exc)
                log.warning(
                    "MCP server %s: %s (attempt %d)", self.spec.name, self.last_error, self.failures
                )
            finally:
                self._client = None
                self.connected.clear()
            await asyncio.sleep(_BACKOFF_S[min(self.failures, len(_BACKOFF_S) - 1)])

    async def _connection(self) -> None:
        self._broken.clear()
        http = capped_http_client()
        client = Client(
            streamable_http_client(
                self.spec.url, http_client=http, max_sse_event_size=MAX_MESSAGE_BYTES
            ),
            mode="legacy",  # handshake-era servers (most of them) and their notifications
            cache=None,
            message_handler=self._message,
            read_timeout_seconds=self.spec.timeout_s,
        )
        async with http, client:
            self._client = client
            await self._read_tools(client)
            self.connected.set()
            log.info("MCP server %s connected", self.spec.name)
            while not self._broken.is_set():
                relist = asyncio.ensure_future(self._relist.wait())
                broken = asyncio.ensure_future(self._broken.wait())
                try:
                    await asyncio.wait({relist, broken}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    relist.cancel()
                    broken.cancel()
                if self._relist.is_set() and not self._broken.is_set():
                    self._relist.clear()
                    await self._read_tools(client)
                    # A server announcing changes without pause gets read once a second.
                    await asyncio.sleep(_RELIST_PAUSE_S)
        if self.last_error:
            log.warning("MCP server %s disconnected: %s", self.spec.name, self.last_error)

    async def _read_tools(self, client: Client) -> None:
        tools: list[types.Tool] = []
        size = 0
        cursor: str | None = None
        for _ in range(MAX_LISTING_PAGES):
            async with asyncio.timeout(self.spec.timeout_s):
                page = await client.list_tools(cursor=cursor)
            for tool in page.tools:
                size += len(tool.model_dump_json(by_alias=True))
                if size > MAX_LISTING_BYTES or len(tools) >= MAX_LISTED_TOOLS:
                    log.warning(
                        "MCP server %s lists more than %d tools or %d bytes of them; the rest "
                        "is left out",
                        self.spec.name,
                        MAX_LISTED_TOOLS,
                        MAX_LISTING_BYTES,
                    )
                    self._on_tools(self.spec.name, tools)
                    return
                tools.append(tool)
            cursor = page.next_cursor
            if cursor is None:
                break
        else:
            log.warning("MCP server %s: its listing has more than %d pages; read that far",
                        self.spec.name, MAX_LISTING_PAGES)  # fmt: skip
        self._on_tools(self.spec.name, tools)

    async def _message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self._relist.set()
        elif isinstance(message, Exception):
            self.last_error = _describe(message)
            self._broken.set()

    async def _usable_client(self) -> Client | None:
        """The connection's client once it is up and not broken; a connection a call just broke
        is still being closed (its client would answer "Connection closed"), so a call waits a
        moment for the new one. None when it does not come."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(min(_RECONNECT_WAIT_S, self.spec.timeout_s)):
                while True:
                    client = self._client
                    usable = self.connected.is_set() and not self._broken.is_set()
                    if client is not None and usable:
                        return client
                    await asyncio.sleep(_RECONNECT_POLL_S)
        return None

    async def call(
        self, tool: str, arguments: dict[str, Any], ctx: CallContext | None = None
    ) -> McpAnswer:
        """Call `tool` (the server's own name); McpServerError naming the server when it is not
        connected, fails, or does not answer within its timeout."""
        client = await self._usable_client()
        name = self.spec.name
        if client is None:
            why = f": {self.last_error}" if self.last_error else ""
            raise McpServerError(
                f"The MCP server {name} is not connected (tooljail keeps reconnecting{why}). "
                "Try again in a while, or use another tool."
            )
        progress = _progress_to(ctx) if ctx is not None and ctx.progress is not None else None
        try:
            async with asyncio.timeout(self.spec.timeout_s):
                return McpAnswer(
                    await client.call_tool(tool, arguments, progress_callback=progress)
                )
        except MCPError as exc:  # the server answered with an error: the connection is fine
            raise McpServerError(
                f"The MCP server {name} refused the {tool} call: {_describe(exc)}"
            ) from exc
        except TimeoutError as exc:
            # The SDK does not end an abandoned request's answer stream: a server could go on
            # sending on it for ever. The connection is made again instead.
            self.last_error = f"the {tool} call was abandoned after {self.spec.timeout_s:g} s"
            self._broken.set()
            raise McpServerError(
                f"The MCP server {name} did not answer {tool} within {self.spec.timeout_s:g} s; "
                "the call was abandoned (it may still have had an effect there)."
            ) from exc
        except Exception as exc:  # transport or protocol failure: reconnect
            self.last_error = _describe(exc)
            self._broken.set()
            raise McpServerError(
                f"The MCP server {name} failed while calling {tool} ({self.last_error}); "
                "tooljail reconnects to it. Try again in a while."
            ) from exc


def _progress_to(ctx: CallContext) -> ProgressFnT:
    """Hands the server's progress notifications of a call to the person watching it (the
    sandbox's runner words them the same way)."""

    async def report(progress: float, total: float | None, message: str | None) -> None:
        amount = f"{progress:g}/{total:g}" if total is not None else f"{progress:g}"
        ctx.report(ProgressUpdate(message=f"{message[:200]}: {amount}" if message else amount))

    return report


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _describe(exc.exceptions[0])
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."
