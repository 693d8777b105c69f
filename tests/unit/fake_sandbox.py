"""A fake SandboxRunner for unit tests: the real runner's semantics, without containers.

WriteFileRequest is carried out on the local filesystem exactly as the runner does it inside a
container (hash precondition checked just before an atomic rename, parents created), and
BashRequest runs `bash -c` locally in the requested directory with the request's timeout, handing
each piece of output to `on_output` as it arrives (the real runner coalesces; this fake does not
need to). Tests can queue canned results (OOM, truncated output...) that no local run could
produce, and hook in just before a write to simulate a concurrent change. Tests only: nothing here
is confined.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import os
import shlex
import signal
import tempfile
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from daemon.errors import ToolError
from daemon.host.confine import is_inside
from daemon.sessions.session import Session
from daemon.tools.call import ToolCall
from daemon.tools.contract import (
    AnyTool,
    CallContext,
    CallFacts,
    ProgressUpdate,
    SandboxRunner,
    ToolOutput,
)
from daemon.tools.read import ReadTool
from daemon.tools.validation import parse_input
from sandbox.backend import (
    BashRequest,
    ExecRequest,
    McpSessionCall,
    McpSessionRequest,
    SandboxLimits,
    SandboxRequest,
    SandboxResult,
    WriteFileRequest,
)


class FakeSandbox(SandboxRunner):
    """Runs requests on the host; records every request with the limits it was given."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        self.calls: list[tuple[SandboxRequest, SandboxLimits]] = []
        self.canned: deque[SandboxResult] = deque()
        """Results returned (in order) instead of running the next requests."""
        self.before_write: Callable[[WriteFileRequest], object] | None = None
        """Called after a write is requested and before its precondition is checked."""
        self._count = 0
        self.placements: list[tuple[str, bool]] = []
        """The image and read-only flag of each request."""
        self.start_delay_s = 0.0
        """How long each request waits for its "container" before it runs (a cold start)."""

    @property
    def requests(self) -> list[SandboxRequest]:
        return [request for request, _ in self.calls]

    async def run(
        self,
        request: SandboxRequest,
        limits: SandboxLimits,
        on_output: Callable[[str], None] | None = None,
        *,
        image: str = "",
        read_only_workspace: bool = False,
        on_start: Callable[[], None] | None = None,
    ) -> SandboxResult:
        self.calls.append((request, limits))
        self.placements.append((image, read_only_workspace))
        self._count += 1
        sandbox_id = f"fake-{self._count}"
        await asyncio.sleep(self.start_delay_s)
        if on_start is not None:
            on_start()
        if self.canned:
            return self.canned.popleft()
        if isinstance(request, WriteFileRequest):
            return self._write(request, sandbox_id)
        if isinstance(request, ExecRequest):
            return await self._exec(request, sandbox_id)
        return await self._bash(request, sandbox_id, on_output)

    async def converse(
        self,
        server: str,
        opening: McpSessionRequest,
        call: McpSessionCall,
        limits: SandboxLimits,
        on_output: Callable[[str], None] | None = None,
        *,
        image: str = "",
    ) -> SandboxResult:
        """Records the call; answers with a canned result (no server runs here)."""
        self.calls.append((call, limits))
        self.placements.append((image, False))
        if self.canned:
            return self.canned.popleft()
        return SandboxResult(exit_code=-1, error=f"the fake sandbox runs no server ({server})")

    async def _exec(self, request: ExecRequest, sandbox_id: str) -> SandboxResult:
        started = time.monotonic()
        try:
            proc = await asyncio.create_subprocess_exec(
                *request.argv,
                cwd=request.cwd,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as exc:
            return SandboxResult(sandbox_id=sandbox_id, exit_code=127, stderr=str(exc))
        try:
            out, err = await asyncio.wait_for(
                proc.communicate(request.stdin.encode()), request.timeout_ms / 1000
            )
        except TimeoutError:
            proc.kill()
            await proc.wait()
            return SandboxResult(sandbox_id=sandbox_id, exit_code=137, timed_out=True)
        return SandboxResult(
            sandbox_id=sandbox_id,
            exit_code=proc.returncode or 0,
            output=out.decode("utf-8", "replace"),
            stderr=err.decode("utf-8", "replace"),
            output_bytes=len(out),
            duration_ms=int((time.monotonic() - started) * 1000),
        )

    def _write(self, request: WriteFileRequest, sandbox_id: str) -> SandboxResult:
        if self.before_write is not None:
            self.before_write(request)
        path = Path(request.path)
        if not path.is_absolute() or not is_inside(self.workspace, path):
            return SandboxResult(sandbox_id=sandbox_id, error=f"{path} is outside the workspace.")
        if path.is_dir():
            return SandboxResult(sandbox_id=sandbox_id, error=f"{path} is a directory.")
        exists = path.exists()
        if request.expected_sha256 is None and exists:
            return SandboxResult(
                sandbox_id=sandbox_id,
                error="the file was created by someone else in the meantime; Read it, then retry.",
            )
        if request.expected_sha256 is not None:
            current = hashlib.sha256(path.read_bytes()).hexdigest() if exists else None
            if current != request.expected_sha256:
                return SandboxResult(
                    sandbox_id=sandbox_id,
                    error="the file changed after it was checked; Read it again, then retry.",
                )
        path.parent.mkdir(parents=True, exist_ok=True)
        mode = path.stat().st_mode & 0o7777 if exists else 0o644
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tooljail-write-")
        with os.fdopen(fd, "wb") as handle:
            handle.write(request.content.encode("utf-8"))
        os.chmod(tmp, mode)
        os.replace(tmp, path)
        return SandboxResult(sandbox_id=sandbox_id)

    async def _bash(
        self, request: BashRequest, sandbox_id: str, on_output: Callable[[str], None] | None
    ) -> SandboxResult:
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="fake-sandbox-") as scratch:
            cwd_file = Path(scratch) / "cwd"
            # Like the real runner: report the directory the shell ended in, when it ends normally.
            script = f"trap 'pwd > {shlex.quote(str(cwd_file))}' EXIT\n{request.command}"
            proc = await asyncio.create_subprocess_exec(
                "bash",
                "-c",
                script,
                cwd=request.cwd,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
            assert proc.stdout is not None
            reader = asyncio.create_task(_read_all(proc.stdout, on_output))
            timed_out = False
            try:
                await asyncio.wait_for(proc.wait(), request.timeout_ms / 1000)
            except TimeoutError:
                timed_out = True
            except asyncio.CancelledError:
                # Like the real executor: a cancelled call's container goes at once.
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
                with contextlib.suppress(asyncio.CancelledError):
                    await reader  # the pipe ends with the process group
                raise
            # The real container is destroyed after the request: nothing it started survives.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            data = await reader
            final_cwd = cwd_file.read_text().strip() if cwd_file.exists() else ""
        code = proc.returncode if proc.returncode is not None else -1
        kept = data
        truncated = len(data) > request.output_limit_bytes
        if truncated:
            half = request.output_limit_bytes // 2
            kept = data[:half] + data[-half:]
        return SandboxResult(
            sandbox_id=sandbox_id,
            exit_code=128 - code if code < 0 else code,
            output=kept.decode("utf-8", errors="replace"),
            output_bytes=len(data),
            output_truncated=truncated,
            timed_out=timed_out,
            final_cwd=final_cwd,
            duration_ms=int((time.monotonic() - started) * 1000),
        )


async def _read_all(stream: asyncio.StreamReader, on_output: Callable[[str], None] | None) -> bytes:
    data = bytearray()
    while chunk := await stream.read(65536):
        data += chunk
        if on_output is not None:
            on_output(chunk.decode("utf-8", errors="replace"))
    return bytes(data)


def make_context(
    workspace: Path,
    *,
    sandbox: SandboxRunner | None = None,
    limits: SandboxLimits | None = None,
    session: Session | None = None,
) -> CallContext:
    """A call context over `workspace` (resolved), with a FakeSandbox unless one is given. Its
    facts are a placeholder: `run_tool` puts in those of the call it prepares."""
    workspace = workspace.resolve()
    return CallContext(
        tool_use_id="toolu_test",
        session=session or Session(id="test-session", workspace=workspace),
        facts=CallFacts(read_only=False, concurrency_safe=False),
        limits=limits or SandboxLimits(),
        sandbox=sandbox if sandbox is not None else FakeSandbox(workspace),
    )


async def _ran(tool: AnyTool, raw: dict[str, Any], ctx: CallContext) -> tuple[Any, ToolOutput]:
    """Prepare and run as the pipeline does (no policy); the tool's result (None on failure)."""
    try:
        call = await ToolCall.prepare_anywhere(tool, raw, ctx.session, ctx.tool_use_id)
        result = await tool.call(call.args, dataclasses.replace(ctx, facts=call.facts))
        return result, tool.render(result)
    except ToolError as exc:
        return None, ToolOutput.text(str(exc), is_error=True)


async def run_tool(tool: AnyTool, raw: dict[str, Any], ctx: CallContext) -> ToolOutput:
    """Prepare, call and render as the pipeline does (no policy); ToolErrors become results."""
    _, output = await _ran(tool, raw, ctx)
    return output


async def run_summarized(
    tool: AnyTool, raw: dict[str, Any], ctx: CallContext
) -> tuple[ToolOutput, str]:
    """Run the call as `run_tool` does and also return its one-line summary for people."""
    result, output = await _ran(tool, raw, ctx)
    return output, tool.summarize(parse_input(tool, raw), result, output)


def listen(ctx: CallContext) -> list[ProgressUpdate]:
    """Collect the call's progress updates (as ExecuteStream would relay them)."""
    updates: list[ProgressUpdate] = []
    ctx.progress = updates.append
    return updates


def text_of(output: ToolOutput) -> str:
    """All text of a tool output."""
    return "".join(getattr(block, "text", "") for block in output.content)


async def read_file(ctx: CallContext, path: Path) -> str:
    """Read `path` with the real Read tool, as a model would before changing the file."""
    output = await run_tool(ReadTool(), {"file_path": str(path)}, ctx)
    assert not output.is_error, text_of(output)
    return text_of(output)
