"""An upstream MCP server that speaks stdio, run in the sandbox.

The server runs in a container over the caller's workspace, with the policy's limits (no network
unless the policy grants it), and the runner talks to it (sandbox/runner/mcp_stdio.py). By default
the container is kept for the caller's session, so the server keeps its state from call to call
(sandbox/kept.py: stopped with the session, when idle, or started afresh when a call is granted
other limits); a server the operator marks stateless is started for each call and nothing of it
survives the call. A crash or a hang costs the call it happened in, and the next call starts
the server again (with backoff). Its tools are listed in a container of its own, over an empty
folder of the daemon's (mounted read-only), again (with backoff) until that works. A server that
says during a call that its tools changed is listed again the same way, never in the call's
container: what one session's server lists there (its state, a file in that workspace shadowing
its code) would otherwise become every tenant's tools, descriptions included. A tool a server
adds only for one session's state is therefore not offered.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
import time
from collections.abc import Callable

import mcp_types as types
from pydantic import ValidationError

from daemon.tools.contract import CallContext, ProgressUpdate, SandboxRunner
from daemon.tools.mcp.config import McpServerSpec
from daemon.tools.mcp.upstream import MAX_LISTED_TOOLS, McpAnswer, McpServerError, ToolsListener
from sandbox.backend import (
    McpSessionCall,
    McpSessionRequest,
    McpStdioRequest,
    SandboxLimits,
    SandboxResult,
)

log = logging.getLogger(__name__)

_BACKOFF_S = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
_RELIST_MIN_INTERVAL_S = 5.0
"""Listings asked for by calls wait this long after the previous one (each starts a container)."""
ListingRunner = Callable[[], tuple[SandboxRunner, str] | None]
"""A runner for listing (and the workspace directory it starts in), None without a sandbox."""


class McpStdioServer:
    """A stdio server's tools and calls."""

    def __init__(
        self,
        spec: McpServerSpec,
        on_tools: ToolsListener,
        listing: ListingRunner,
        limits: SandboxLimits,
    ) -> None:
        self.spec = spec
        self._on_tools = on_tools
        self._listing = listing
        self._limits = limits
        self._task: asyncio.Task[None] | None = None
        self._relisting: asyncio.Task[None] | None = None
        self._last_relist = float("-inf")
        self.listed = asyncio.Event()
        self.last_error = ""

    def start(self) -> None:
        """List the tools in the background (again, with backoff, until it works)."""
        self._task = asyncio.create_task(self._list_until_done(), name=f"mcp-{self.spec.name}")

    async def stop(self) -> None:
        """Stop listing."""
        for task in (self._task, self._relisting):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    async def _list_until_done(self) -> None:
        attempt = 0
        while True:
            try:
                await self._list()
            except (McpServerError, OSError) as exc:
                self.last_error = str(exc)
                log.warning("MCP server %s: cannot list its tools: %s", self.spec.name, exc)
            else:
                self.listed.set()
                return
            await asyncio.sleep(_BACKOFF_S[min(attempt, len(_BACKOFF_S) - 1)])
            attempt += 1

    def _relist_soon(self) -> None:
        """The server said during a call that its tools changed: list them again where the
        daemon lists them (one listing at a time, at most one every _RELIST_MIN_INTERVAL_S)."""
        if self._relisting is None or self._relisting.done():
            # A context of its own: the listing is the daemon's, not part of the call that
            # asked for it (its log fields, its timeline).
            self._relisting = asyncio.create_task(
                self._relist(), name=f"mcp-{self.spec.name}-relist", context=contextvars.Context()
            )

    async def _relist(self) -> None:
        wait = self._last_relist + _RELIST_MIN_INTERVAL_S - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        self._last_relist = time.monotonic()
        try:
            await self._list()
        except (McpServerError, OSError) as exc:
            log.warning("MCP server %s: cannot list its changed tools: %s", self.spec.name, exc)

    async def _list(self) -> None:
        found = self._listing()
        if found is None:
            raise McpServerError(f"the MCP server {self.spec.name} needs the sandbox")
        runner, cwd = found
        request = McpStdioRequest(
            argv=self.spec.command,
            cwd=cwd,
            method="tools/list",
            timeout_ms=int(self.spec.timeout_s * 1000),
        )
        result = await runner.run(
            request, self._limits, image=self.spec.image, read_only_workspace=True
        )
        answer = self._answer(result, "tools/list")
        try:
            listing = types.ListToolsResult.model_validate(answer)
        except ValidationError as exc:
            raise McpServerError(
                f"its tool listing is malformed ({exc.error_count()} errors)"
            ) from exc
        self._on_tools(self.spec.name, listing.tools[:MAX_LISTED_TOOLS])

    def _answer(self, result: SandboxResult, what: str) -> object:
        name = self.spec.name
        if result.error:
            stderr = f"; it said: {result.stderr.strip()[-500:]}" if result.stderr.strip() else ""
            raise McpServerError(f"The MCP server {name} (in the sandbox) failed {what}: "
                                 f"{result.error}{stderr}")  # fmt: skip
        try:
            return json.loads(result.output)
        except (ValueError, RecursionError) as exc:
            raise McpServerError(f"The MCP server {name} answered {what} with garbage") from exc

    async def call(
        self, tool: str, arguments: dict[str, object], ctx: CallContext | None = None
    ) -> McpAnswer:
        """Start the server in the call's sandbox and call `tool` there."""
        if ctx is None:
            raise McpServerError(f"The MCP server {self.spec.name} runs only inside a call")
        runner = ctx.require_sandbox()
        timeout_ms = min(int(self.spec.timeout_s * 1000), ctx.limits.timeout_ms)
        params: dict[str, object] = {"name": tool, "arguments": arguments}

        def report(line: str) -> None:
            ctx.report(ProgressUpdate(message=line.strip()))

        on_output = report if ctx.progress is not None else None
        if self.spec.stateless:
            request = McpStdioRequest(
                argv=self.spec.command,
                cwd=str(ctx.workspace),
                method="tools/call",
                params=params,
                timeout_ms=timeout_ms,
            )
            result = await runner.run(request, ctx.limits, on_output, image=self.spec.image)
        else:
            opening = McpSessionRequest(
                argv=self.spec.command,
                cwd=str(ctx.workspace),
                timeout_ms=timeout_ms,
            )
            call = McpSessionCall(method="tools/call", params=params, timeout_ms=timeout_ms)
            result = await runner.converse(
                self.spec.name, opening, call, ctx.limits, on_output, image=self.spec.image
            )
        if result.timed_out:
            raise McpServerError(
                f"The MCP server {self.spec.name} did not answer {tool} within "
                f"{timeout_ms / 1000:g} s; it was stopped."
            )
        if result.listing:
            # Read in this caller's container: a signal to list again, never the tools.
            self._relist_soon()
        answer = self._answer(result, tool)
        try:
            return McpAnswer(types.CallToolResult.model_validate(answer), result.sandbox_id)
        except ValidationError as exc:
            raise McpServerError(
                f"The MCP server {self.spec.name} answered {tool} with a malformed result "
                f"({exc.error_count()} problems)"
            ) from exc
