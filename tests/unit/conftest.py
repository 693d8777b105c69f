"""Generic fixtures: a session over a temporary workspace and a call context for host-side tools."""

from __future__ import annotations

import dataclasses
import mmap
import os
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from daemon.host.pinned import PinnedDirectory
from daemon.sessions.session import Session
from daemon.tools.call import ToolCall
from daemon.tools.contract import AnyTool, CallContext, CallFacts, ToolOutput
from sandbox.backend import SandboxLimits

CallTool = Callable[..., Awaitable[ToolOutput]]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """The resolved workspace root (tmp_path itself may sit behind a symlink)."""
    return tmp_path.resolve()


@pytest.fixture
def session(workspace: Path) -> Iterator[Session]:
    """A session over `workspace`, pinned as the daemon pins one when it opens it."""
    root = PinnedDirectory.pin(workspace)
    yield Session(id="t", workspace=workspace, root=root)
    root.close()


@pytest.fixture
def ctx(session: Session) -> CallContext:
    """A call context without a sandbox (enough for the host-side tools)."""
    return CallContext(
        tool_use_id="toolu_test",
        session=session,
        facts=CallFacts(read_only=False, concurrency_safe=False),
        limits=SandboxLimits(),
    )


@pytest.fixture
def call_tool(ctx: CallContext) -> CallTool:
    """Validate raw input against the tool's model, run `validate`, `call` and `render`.

    ToolErrors propagate, so tests can assert on their type and message.
    """

    async def run(tool: AnyTool, raw: dict[str, Any]) -> ToolOutput:
        call = await ToolCall.prepare_anywhere(tool, raw, ctx.session, ctx.tool_use_id)
        return tool.render(await tool.call(call.args, dataclasses.replace(ctx, facts=call.facts)))

    return run


def write_uncached(path: Path, data: bytes) -> bool:
    """Write `data` (a multiple of 4096 bytes) past the page cache (O_DIRECT), so that nothing
    of the file is cached until it is read; False where the filesystem does not take O_DIRECT
    (tmpfs). Evicting pages afterwards (fadvise) is only advice the kernel may not follow."""
    assert len(data) % 4096 == 0
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
    except OSError:
        return False
    try:
        buffer = mmap.mmap(-1, len(data))  # page-aligned, as O_DIRECT needs
        buffer.write(data)
        os.write(fd, buffer)
        buffer.close()
    finally:
        os.close(fd)
    return True


def links_unreadable_below(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """readlink of any name below `folder` fails as in a folder the daemon may not search (its
    owner closed it, and the daemon is not root)."""
    real_readlink = os.readlink

    def refused(path: str, *, dir_fd: int | None = None) -> str:
        where = path if dir_fd is None else f"{real_readlink(f'/proc/self/fd/{dir_fd}')}/{path}"
        if where.startswith(f"{folder}/"):
            raise PermissionError(13, "Permission denied", path)
        return real_readlink(path, dir_fd=dir_fd)

    monkeypatch.setattr(os, "readlink", refused)


@dataclasses.dataclass
class _FakeClient:
    """What DockerBackend takes of a docker client: its low-level API, here a fake engine."""

    api: Any


@pytest.fixture
def backend_over() -> Iterator[Callable[[Any], Any]]:
    """A DockerBackend over a fake engine (its `api`); its worker threads are shut down after
    the test, and the engine's `close()` called, if it has one."""
    from sandbox.docker_backend import DockerBackend

    made: list[DockerBackend] = []

    def make(engine: Any) -> DockerBackend:
        backend = DockerBackend(image="i", instance_id="test", client=_FakeClient(engine))  # type: ignore[arg-type]
        made.append(backend)
        return backend

    yield make
    for backend in made:
        backend._threads.shutdown(wait=True)
        backend._removals.shutdown(wait=True)
        getattr(backend.api, "close", lambda: None)()
