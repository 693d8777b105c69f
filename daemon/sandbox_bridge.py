"""Connects the Tool contract's SandboxRunner to the sandbox package's executor."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from daemon.session import Session
from daemon.tools.contract import SandboxRunner
from sandbox.backend import SandboxLimits, SandboxRequest, SandboxResult, SandboxSpec


class Executor(Protocol):
    """What the daemon needs from sandbox.executor.SandboxExecutor."""

    async def run(
        self,
        spec: SandboxSpec,
        request: SandboxRequest,
        *,
        tool_use_id: str = "",
        on_output: Callable[[str], None] | None = None,
    ) -> SandboxResult:
        """Run one request in a fresh container."""
        ...


class SessionSandboxRunner(SandboxRunner):
    """Runs a call's requests in containers over the session's workspace."""

    def __init__(self, executor: Executor, session: Session, tool_use_id: str) -> None:
        self._executor = executor
        self._session = session
        self._tool_use_id = tool_use_id

    async def run(
        self,
        request: SandboxRequest,
        limits: SandboxLimits,
        on_output: Callable[[str], None] | None = None,
    ) -> SandboxResult:
        spec = SandboxSpec(
            workspace=self._session.workspace, limits=limits, session_id=self._session.id
        )
        return await self._executor.run(
            spec, request, tool_use_id=self._tool_use_id, on_output=on_output
        )
