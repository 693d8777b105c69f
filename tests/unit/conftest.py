"""Generic fixtures: a session over a temporary workspace and a call context for host-side tools."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from daemon.session import Session
from daemon.tools.contract import AnyTool, CallContext, ToolOutput
from sandbox.backend import SandboxLimits

CallTool = Callable[..., Awaitable[ToolOutput]]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """The resolved workspace root (tmp_path itself may sit behind a symlink)."""
    return tmp_path.resolve()


@pytest.fixture
def session(workspace: Path) -> Session:
    return Session(id="t", workspace=workspace)


@pytest.fixture
def ctx(session: Session) -> CallContext:
    """A call context without a sandbox (enough for the host-side tools)."""
    return CallContext(tool_use_id="toolu_test", session=session, limits=SandboxLimits())


@pytest.fixture
def call_tool(ctx: CallContext) -> CallTool:
    """Validate raw input against the tool's model, run `validate`, `call` and `render`.

    ToolErrors propagate, so tests can assert on their type and message.
    """

    async def run(tool: AnyTool, raw: dict[str, Any]) -> ToolOutput:
        args = tool.validate(tool.input_model.model_validate(raw), ctx.session)
        return tool.render(await tool.call(args, ctx))

    return run
