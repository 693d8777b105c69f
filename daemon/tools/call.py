"""One call of a tool: prepared once (schema, semantic checks, the tool's analysis), then run.

`ToolCall.prepare` is the only place that asks a tool about a call; everything downstream (the
scheduler, the hooks, the policy, the call itself) reads the prepared `ToolCall`. `run_call` runs
it as its interrupt behaviour says and maps every failure to an `is_error` output that tells the
model what to do next.

Both contain a tool's own bugs: an unexpected exception while preparing (a hostile input can
find one, as nested braces once sent Glob past the recursion limit) is a ToolError naming the tool,
so the call is answered and audited like any refused input, and the other calls of its batch go
on; one while running is an is_error result the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from daemon.errors import SandboxError, ToolError
from daemon.host.loop_safe import NeedsThread
from daemon.host.threads import FILESYSTEM_THREADS
from daemon.json_values import canonical_input_hash, is_large
from daemon.sessions.session import Session
from daemon.tools.contract import AnyTool, CallContext, CallFacts, InterruptBehavior, ToolOutput
from daemon.tools.validation import parse_input

log = logging.getLogger(__name__)


class PrepareFailed(ToolError):
    """A tool failed unexpectedly while validating or analysing a call (a bug in the tool)."""


@dataclass(frozen=True)
class ToolCall:
    """A call whose input is valid, with what the tool says it will do."""

    tool_use_id: str
    tool: AnyTool
    args: Any
    """The validated (possibly normalised) input: an instance of the tool's input model."""
    session: Session
    facts: CallFacts
    analysed_in: Path | None = None
    """The session's working directory when the call was analysed: what a relative path in the
    input meant (the session's `cwd`, None for its workspace root)."""
    analysed_after: int = 0
    """How many changing calls of the session had ended when it was analysed (`changes`)."""

    @classmethod
    def prepare(
        cls, tool: AnyTool, raw_input: dict[str, Any], session: Session, tool_use_id: str
    ) -> ToolCall:
        """Validate `raw_input` (schema, then semantics) and analyse the call; raises
        ToolInputError saying what is wrong, or PrepareFailed when the tool itself failed."""
        analysed_in, analysed_after = session.cwd, session.changes
        try:
            args = tool.validate(parse_input(tool, raw_input), session)
            facts = tool.analyse(args, session)
            return cls(tool_use_id, tool, args, session, facts, analysed_in, analysed_after)
        except (ToolError, NeedsThread):
            raise
        except Exception as exc:
            incident = uuid.uuid4().hex[:12]
            log.exception(
                "tool %s failed preparing call %s (incident %s)", tool.name, tool_use_id, incident
            )
            raise PrepareFailed(
                f"The {tool.name} tool failed with an internal error while checking its input "
                f"(incident {incident}); this is a tooljail bug, not a problem with your input. "
                "Try another approach."
            ) from exc

    @classmethod
    async def prepare_anywhere(
        cls, tool: AnyTool, raw_input: dict[str, Any], session: Session, tool_use_id: str
    ) -> ToolCall:
        """`prepare` from the event loop: on it where the kernel's caches answer, else in one of
        the session owner's threads (daemon.host.loop_safe)."""
        try:
            return cls.prepare(tool, raw_input, session, tool_use_id)
        except NeedsThread:
            return await FILESYSTEM_THREADS.run(
                session.owner, functools.partial(cls.prepare, tool, raw_input, session, tool_use_id)
            )

    def with_input(self, raw_input: dict[str, Any]) -> ToolCall:
        """The same call with another input (a hook rewrote it), validated and analysed anew."""
        return self.prepare(self.tool, raw_input, self.session, self.tool_use_id)

    @functools.cached_property
    def input_json(self) -> dict[str, Any]:
        """The validated input as JSON (policy input, approval binding, hooks)."""
        dumped: dict[str, Any] = self.args.model_dump(mode="json", by_alias=True)
        return dumped

    @property
    def stale(self) -> bool:
        """The session moved, or a call that may have changed the workspace ended, since this
        call was analysed: what its paths name may have changed (a `cd`, a link)."""
        return self.analysed_in != self.session.cwd or self.analysed_after != self.session.changes

    @functools.cached_property
    def input_hash(self) -> str:
        """Canonical hash of the validated input (approval binding, refusal counts)."""
        return canonical_input_hash(self.input_json, large=self.large_input)

    @functools.cached_property
    def large_input(self) -> bool:
        """Whether hashing or serialising the input belongs in a worker thread."""
        return is_large(self.input_json)


@dataclass(frozen=True)
class Ran:
    """What running a call gave."""

    result: Any
    """The tool's own result; None when it failed before it had one."""
    output: ToolOutput
    """The result mapped to tool_result content (or the error the model reads)."""

    def summary(self, call: ToolCall) -> str:
        """The tool's one line for people (a generic one if the tool fails to say: the result
        is what matters)."""
        try:
            return call.tool.summarize(call.args, self.result, self.output)
        except Exception:
            log.exception("tool %s failed to summarize a call", call.tool.name)
            return f"{call.tool.name} failed" if self.output.is_error else f"{call.tool.name} done"


async def run_call(call: ToolCall, ctx: CallContext) -> Ran:
    """Run the call. A `cancel` tool stops at once when interrupted; a `block` tool finishes its
    current step first, so an interrupted Edit never leaves a half-written file, then the
    cancellation goes on."""
    if call.tool.traits.interrupt is InterruptBehavior.CANCEL:
        return await _run(call, ctx)
    task = asyncio.create_task(_run(call, ctx))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        while not task.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(task)
        raise


async def _run(call: ToolCall, ctx: CallContext) -> Ran:
    tool = call.tool
    try:
        result = await tool.call(call.args, ctx)
        return Ran(result, tool.render(result))
    except ToolError as exc:
        return _failed(str(exc))
    except SandboxError as exc:
        log.warning("sandbox failure in %s: %s", tool.name, exc)
        return _failed(
            f"The sandbox could not run this {tool.name} call: {exc}. Nothing was changed by "
            "this call unless its output says so; retry it, and if it keeps failing, tell the "
            "user the sandbox is unavailable."
        )
    except FileNotFoundError as exc:
        return _failed(
            f"{exc.filename or 'The file'} does not exist. Check the path (Glob or LS can find "
            "it) and try again."
        )
    except IsADirectoryError as exc:
        return _failed(
            f"{exc.args[0] if exc.args else 'The path'} is a directory, not a file; use LS to "
            "list it."
        )
    except PermissionError as exc:
        return _failed(f"Permission denied for {exc.filename or 'that path'}.")
    except OSError as exc:
        # Host file system errors, e.g. a path swapped or removed while the call ran.
        return _failed(
            f"Could not access {exc.filename or 'a path'}: {exc.strerror or exc}. It may have "
            "changed while the call ran; check it and retry."
        )
    except Exception:
        incident = uuid.uuid4().hex[:12]
        log.exception("tool %s failed unexpectedly (incident %s)", tool.name, incident)
        return _failed(
            f"The {tool.name} tool failed with an internal error (incident {incident}); this is "
            "a tooljail bug, not a problem with your input. Try another approach."
        )


def _failed(text: str) -> Ran:
    return Ran(None, ToolOutput.text(text, is_error=True))
