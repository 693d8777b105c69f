"""The call lifecycle, in order: look up, validate (schema, then semantics), decide (OPA), execute,
map to a tool_result, fit the result budget, audit. Every failure a model can act on becomes an
is_error tool_result; only malformed requests become gRPC statuses (raised as RequestError)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from daemon.audit import AuditEvent, AuditLog
from daemon.budget import fit_with_notes
from daemon.config import SandboxCeilings, clamp_limits
from daemon.errors import SandboxError, ToolError, Unavailable
from daemon.hook_stage import HookStage
from daemon.hooks.engine import HookEngine
from daemon.models import (
    Caller,
    Decision,
    ExecuteOutcome,
    ExecutionReport,
    Outcome,
    TextContent,
    ToolResult,
    ToolUse,
)
from daemon.policy.approval import ApprovalAuthority, canonical_input_hash
from daemon.policy.document import listing_document
from daemon.policy.engine import PolicyEngine
from daemon.policy.gate import PolicyGate
from daemon.policy.verdict import Verdict
from daemon.service.metrics import CallOutcome, Metrics
from daemon.session import Session
from daemon.sessions import SessionStore
from daemon.tools.contract import (
    AnyTool,
    CallContext,
    InterruptBehavior,
    ProgressSink,
    SandboxRunner,
    ToolInput,
    ToolOutput,
    TouchedPath,
)
from daemon.tools.peers import PeerHandle
from daemon.tools.registry import ToolDefinition, ToolRegistry
from daemon.tools.validation import parse_input
from sandbox.backend import SandboxLimits

log = logging.getLogger(__name__)

#: Builds the sandbox runner a call uses (None when the daemon has no sandbox).
RunnerFactory = Callable[[Session, str], SandboxRunner | None]


@dataclass(frozen=True)
class CallRequest:
    """One tool_use to execute, as the transport delivered it (already well-formed)."""

    tool_use: ToolUse
    session_id: str = ""
    approval_token: str = ""
    approval_scope: str = "once"
    """With a token: "once", or "session" (similar calls need no approval for the session)."""
    progress: ProgressSink | None = None
    """Where live progress goes (ExecuteStream); None when nobody listens."""

    @functools.cached_property
    def input_sha256(self) -> str:
        """Canonical hash of the input as sent (computed once: audit and idempotency share it)."""
        return canonical_input_hash(self.tool_use.input)


@dataclass(frozen=True)
class PreparedCall:
    """A call after look-up and validation: ready to decide and run, or already answered."""

    request: CallRequest
    session: Session
    started: float
    """Monotonic time the call arrived."""
    tool: AnyTool | None = None
    args: ToolInput | None = None
    paths: list[TouchedPath] = field(default_factory=list)
    early: str | None = None
    """Set when look-up or validation failed: the error text the model gets; nothing runs."""
    timings: dict[str, float] = field(default_factory=dict)
    """decision_s and exec_s once measured (for metrics)."""
    hook_records: list[dict[str, Any]] = field(default_factory=list)
    """What each hook said (for the audit line)."""
    peers: PeerHandle | None = None
    """Set by the scheduler for a parallel group's calls that may share work."""

    @property
    def concurrency_safe(self) -> bool:
        """May run beside other safe calls. A call that failed validation is not safe."""
        if self.early is not None or self.tool is None or self.args is None:
            return False
        return self.tool.is_concurrency_safe(self.args)


@dataclass(frozen=True)
class PipelineLimits:
    """The daemon's own bounds on every call."""

    result_budget_chars: int
    default_sandbox: SandboxLimits
    ceilings: SandboxCeilings


def masked(value: Any, fields: frozenset[str]) -> Any:
    """The input with the values of `fields` replaced, at any depth (for the audit log)."""
    if isinstance(value, dict):
        return {
            key: "***masked***" if key in fields else masked(item, fields)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [masked(item, fields) for item in value]
    return value


def _one_line(text: str, limit: int = 200) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _error(tool_use_id: str, text: str) -> ToolResult:
    return ToolResult(tool_use_id=tool_use_id, content=(TextContent(text=text),), is_error=True)


class Pipeline:
    """Runs tool calls through the lifecycle."""

    def __init__(
        self,
        registry: ToolRegistry,
        policy: PolicyEngine,
        sessions: SessionStore,
        limits: PipelineLimits,
        audit: AuditLog,
        runner_factory: RunnerFactory,
        approvals: ApprovalAuthority | None = None,
        metrics: Metrics | None = None,
        hooks: HookEngine | None = None,
    ) -> None:
        self._metrics = metrics
        self._hooks = HookStage(hooks)
        self._registry = registry
        self._policy = policy
        self._gate = PolicyGate(policy, approvals)
        self._sessions = sessions
        self._limits = limits
        self._audit = audit
        self._runner_factory = runner_factory

    async def list_tools(
        self, session_id: str, caller: Caller, *, include_deferred: bool = False
    ) -> list[ToolDefinition]:
        """The enabled tools this caller may see, in registry order (deferred ones on request)."""
        session = self._sessions.get(session_id)
        definitions = [self._registry.definition(t.name) for t in self._registry.enabled()]
        visible = await self._policy.visible_tools(listing_document(definitions, session, caller))
        if visible is None:
            raise Unavailable("the policy engine cannot be reached; retry ListTools later")
        return [
            d
            for d in definitions
            if d.name in visible and (include_deferred or not d.defer_loading)
        ]

    def prepare(self, request: CallRequest) -> PreparedCall:
        """Look up and validate, without side effects; failures are kept as an early answer."""
        started = time.monotonic()
        session = self._sessions.get(request.session_id)
        tool_use = request.tool_use
        tool = self._registry.get(tool_use.name)
        if tool is None:
            names = ", ".join(self._registry.names())
            return PreparedCall(
                request,
                session,
                started,
                early=f"Unknown tool {tool_use.name!r}. The available tools are: {names}. "
                "Call one of those instead.",
            )
        try:
            args = parse_input(tool, tool_use.input)
            args = tool.validate(args, session)
            paths = tool.touched_paths(args, session)
        except ToolError as exc:
            return PreparedCall(request, session, started, tool=tool, early=str(exc))
        return PreparedCall(request, session, started, tool=tool, args=args, paths=paths)

    async def execute(self, request: CallRequest, caller: Caller) -> ExecuteOutcome:
        """Run one call through every step; never raises for anything the model did."""
        return await self.run(self.prepare(request), caller)

    async def run(self, call: PreparedCall, caller: Caller) -> ExecuteOutcome:
        """Decide, execute, map, fit and audit a prepared call."""
        tool_use = call.request.tool_use
        if call.early is not None or call.tool is None or call.args is None:
            result = _error(tool_use.id, call.early or "The call could not be prepared.")
            known = call.tool is not None
            summary = (
                f"{tool_use.name}: invalid input" if known else f"Unknown tool {tool_use.name}"
            )
            return self._finish(call, caller, None, result, ExecutionReport(), summary=summary)
        tool, args, session = call.tool, call.args, call.session
        try:
            hooked = await self._hooks.before(tool, args, call.paths, session, tool_use.id)
        except ToolError as exc:
            text = f"A PreToolUse hook rewrote the input into one that is not valid: {exc}"
            summary = f"{tool.name}: hook rewrote an invalid input"
            return self._finish(
                call, caller, None, _error(tool_use.id, text), ExecutionReport(), summary=summary
            )
        args = hooked.args

        decision_started = time.monotonic()
        gate = await self._gate.decide(
            tool,
            args,
            hooked.paths,
            session,
            caller,
            tool_use.id,
            call.request.approval_token,
            call.request.approval_scope,
            hooked.outcome.to_policy(),
        )
        verdict = self._hooks.enforce(gate.verdict, hooked.outcome)
        if not verdict.decision_id:  # OPA gives none when the daemon decided itself
            verdict = dataclasses.replace(verdict, decision_id=uuid.uuid4().hex)
        call.timings["decision_s"] = time.monotonic() - decision_started
        if verdict.outcome is not Outcome.ALLOW:
            result = _error(tool_use.id, self._refusal_text(tool.name, verdict))
            word = "needs approval" if verdict.outcome is Outcome.ASK else "denied by policy"
            return self._finish(
                call,
                caller,
                verdict,
                result,
                ExecutionReport(),
                # A hook's deny may override the policy's ask: then no token is handed out.
                gate.approval_token if verdict.outcome is Outcome.ASK else "",
                summary=f"{tool.name} {word}",
            )

        limits = clamp_limits(verdict.limits or self._limits.default_sandbox, self._limits.ceilings)
        budget = min(tool.traits.max_result_chars, self._limits.result_budget_chars)
        if verdict.result_budget_chars is not None:
            budget = min(budget, verdict.result_budget_chars)
        ctx = CallContext(
            tool_use_id=tool_use.id,
            session=session,
            limits=limits,
            sandbox=self._runner_factory(session, tool_use.id) if tool.traits.sandboxed else None,
            progress=call.request.progress,
            catalog=lambda: self.list_tools(session.id, caller, include_deferred=True),
            peers=call.peers,
        )
        if not tool.is_read_only(args):
            # On file before it runs: a call that may change something and is cut short by a
            # crash still has its allow recorded.
            self._audit.write(
                self._audit_record(call, caller, verdict, verdict.decision_id, AuditEvent.DECIDED)
            )
        exec_started = time.monotonic()
        with self._metrics.in_flight() if self._metrics else contextlib.nullcontext():
            output = await self._run_respecting_interrupt(tool, args, ctx)
        call.timings["exec_s"] = time.monotonic() - exec_started
        after = await self._hooks.after(
            tool, args, session, tool_use.id, hooked.outcome, output.content, output.is_error
        )
        call.hook_records[:] = after.records
        output.content, output.is_error = after.content, after.is_error
        content, fitted = fit_with_notes(output.content, after.notes, budget, output.keep)
        report = ExecutionReport(
            sandboxed=tool.traits.sandboxed,
            sandbox_id=output.sandbox_id,
            exit_code=output.exit_code,
            timed_out=output.timed_out,
            oom_killed=output.oom_killed,
            duration_ms=int((time.monotonic() - exec_started) * 1000),
            truncated=fitted.truncated,
            original_chars=fitted.original_chars,
        )
        result = ToolResult(tool_use_id=tool_use.id, content=content, is_error=output.is_error)
        summary = _one_line(tool.summarize(args, output))
        return self._finish(call, caller, verdict, result, report, summary=summary)

    @staticmethod
    def _refusal_text(tool_name: str, verdict: Verdict) -> str:
        reasons = "\n".join(f"- {reason}" for reason in verdict.reasons)
        if verdict.outcome is Outcome.ASK:
            return (
                f"The {tool_name} call needs a human's approval before it can run:\n{reasons}\n"
                "It did not run. The caller has been given an approval token; once a human "
                "approves, the same call is sent again with it. Otherwise do something else."
            )
        return (
            f"The {tool_name} call was denied by policy:\n{reasons}\n"
            "It did not run. Do not retry it unchanged."
        )

    @classmethod
    async def _run_respecting_interrupt(
        cls, tool: AnyTool, args: Any, ctx: CallContext
    ) -> ToolOutput:
        """A `cancel` tool stops at once; a `block` tool finishes its current step first, so an
        interrupted Edit never leaves a half-written file, then the cancellation goes on."""
        if tool.traits.interrupt is InterruptBehavior.CANCEL:
            return await cls._run_tool(tool, args, ctx)
        task = asyncio.create_task(cls._run_tool(tool, args, ctx))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            while not task.done():
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(task)
            raise

    @staticmethod
    async def _run_tool(tool: AnyTool, args: Any, ctx: CallContext) -> ToolOutput:
        try:
            return tool.render(await tool.call(args, ctx))
        except ToolError as exc:
            return ToolOutput.text(str(exc), is_error=True)
        except SandboxError as exc:
            log.warning("sandbox failure in %s: %s", tool.name, exc)
            return ToolOutput.text(
                f"The sandbox could not run this {tool.name} call: {exc}. Nothing was changed by "
                "this call unless its output says so; retry it, and if it keeps failing, tell the "
                "user the sandbox is unavailable.",
                is_error=True,
            )
        except FileNotFoundError as exc:
            return ToolOutput.text(
                f"{exc.filename or 'The file'} does not exist. Check the path (Glob or LS can "
                "find it) and try again.",
                is_error=True,
            )
        except IsADirectoryError as exc:
            return ToolOutput.text(
                f"{exc.args[0] if exc.args else 'The path'} is a directory, not a file; use LS to "
                "list it.",
                is_error=True,
            )
        except PermissionError as exc:
            return ToolOutput.text(
                f"Permission denied for {exc.filename or 'that path'}.", is_error=True
            )
        except OSError as exc:
            # Host file system errors, e.g. a path swapped or removed while the call ran.
            return ToolOutput.text(
                f"Could not access {exc.filename or 'a path'}: {exc.strerror or exc}. It may have "
                "changed while the call ran; check it and retry.",
                is_error=True,
            )
        except Exception:
            incident = uuid.uuid4().hex[:12]
            log.exception("tool %s failed unexpectedly (incident %s)", tool.name, incident)
            return ToolOutput.text(
                f"The {tool.name} tool failed with an internal error (incident {incident}); "
                "this is a tooljail bug, not a problem with your input. Try another approach.",
                is_error=True,
            )

    def _audit_record(
        self,
        call: PreparedCall,
        caller: Caller,
        verdict: Verdict | None,
        decision_id: str,
        event: AuditEvent,
    ) -> dict[str, Any]:
        """The fields every audit record of a call has, as known once it is decided."""
        tool_use = call.request.tool_use
        reused = verdict.cached_from if verdict else ""
        return {
            "event": event.value,
            "time": time.time(),
            "decision_id": decision_id,
            "principal": caller.principal,
            "session": call.session.id,
            "tool_use_id": tool_use.id,
            "tool": tool_use.name,
            "input_sha256": call.request.input_sha256,
            "input": masked(tool_use.input, self._policy.audit_mask),
            "outcome": verdict.outcome.value if verdict else "not_evaluated",
            "reasons": list(verdict.reasons) if verdict else [],
            "policy_revision": self._gate.revision if verdict else "",
            # A reused verdict: the id of the OPA decision (and decision log entry) it repeats.
            **({"decision_cached_from": reused} if reused else {}),
        }

    def _finish(
        self,
        call: PreparedCall,
        caller: Caller,
        verdict: Verdict | None,
        result: ToolResult,
        report: ExecutionReport,
        approval_token: str = "",
        *,
        summary: str = "",
    ) -> ExecuteOutcome:
        request = call.request
        # run() gives every verdict a decision id; a call never decided gets one here.
        decision_id = verdict.decision_id if verdict else uuid.uuid4().hex
        decision = Decision(
            outcome=verdict.outcome if verdict else None,
            reasons=verdict.reasons if verdict else (),
            decision_id=decision_id,
            policy_revision=self._gate.revision if verdict else "",
            approval_token=approval_token,
        )
        self._audit.write(
            {
                **self._audit_record(call, caller, verdict, decision_id, AuditEvent.ANSWERED),
                "is_error": result.is_error,
                "truncated": report.truncated,
                "duration_ms": int((time.monotonic() - call.started) * 1000),
                **({"hooks": call.hook_records} if call.hook_records else {}),
            }
        )
        outcome = ExecuteOutcome(result=result, decision=decision, report=report, summary=summary)
        if self._metrics is not None:
            self._metrics.observe_call(
                request.tool_use.name,
                CallOutcome.of(outcome),
                decision_s=call.timings.get("decision_s"),
                exec_s=call.timings.get("exec_s"),
                truncated=report.truncated,
                decision_reused=bool(verdict and verdict.cached_from),
            )
        return outcome
