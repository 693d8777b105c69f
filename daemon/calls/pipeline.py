"""The call lifecycle, in order: look up, validate (schema, then semantics), PreToolUse hooks,
decide (OPA), execute, map to a tool_result, PostToolUse hooks, fit the result budget, audit.
Every failure a model can act on becomes an is_error tool_result; only malformed requests become
gRPC statuses (raised as RequestError)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol

from daemon.calls.audit import AuditEvent, AuditLog
from daemon.calls.batch_hooks import AnsweredCall, BatchHooks
from daemon.calls.budget import fit_content, fit_text, fit_with_notes
from daemon.calls.hook_stage import HookStage
from daemon.calls.kept_outputs import KeptOutputs, text_of, with_preview
from daemon.egress.proxy import EgressCall
from daemon.errors import NotFound, RequestError, ToolError, Unavailable
from daemon.hooks.engine import HookEngine, PreHookOutcome
from daemon.host.loop_safe import NeedsThread
from daemon.host.threads import FILESYSTEM_THREADS
from daemon.json_values import (
    LARGE_VALUE_CHARS,
    approximate_chars,
    canonical_input_hash,
)
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
from daemon.ops.logs import log_context
from daemon.ops.metrics import CallOutcome, Metrics
from daemon.policy.approval import ApprovalAuthority
from daemon.policy.engine import PolicyEngine
from daemon.policy.gate import ApprovalRequest, GateDecision, PolicyGate
from daemon.policy.input import egress_call_facts, listing_document
from daemon.policy.mask import AuditMask
from daemon.policy.pending import AskState
from daemon.policy.verdict import Verdict
from daemon.sessions.own_defaults import OwnDefaults
from daemon.sessions.session import Session
from daemon.sessions.store import SessionStore
from daemon.shell.bounded import parse_bounded
from daemon.tools.background import BackgroundShells
from daemon.tools.call import ToolCall, run_call
from daemon.tools.contract import AnyTool, CallContext, ProgressSink, SandboxRunner
from daemon.tools.peers import PeerHandle
from daemon.tools.registry import ToolDefinition, ToolRegistry
from daemon.tools.tool_search import ToolSearchTool
from sandbox import timeline
from sandbox.backend import NetworkMode, SandboxLimits
from sandbox.limits import SandboxCeilings, clamp_limits
from sandbox.timeline import Timeline

log = logging.getLogger(__name__)


class SandboxProvider(Protocol):
    """Gives a sandboxed call its runner (daemon.app.sandbox.Sandbox)."""

    def runner(
        self, session: Session, tool_use_id: str, egress: EgressCall | None = None
    ) -> SandboxRunner | None:
        """The call's runner; None when the daemon has no sandbox (the tool then says so)."""
        ...

    @property
    def available(self) -> bool:
        """Whether sandboxed calls can run at all (a sandbox is configured and was started)."""
        ...

    @property
    def shells(self) -> BackgroundShells | None:
        """The background commands of every session (None without a sandbox)."""
        ...


@dataclass(frozen=True)
class CallRequest:
    """One tool_use to execute, as the transport delivered it (already well-formed)."""

    tool_use: ToolUse
    session_id: str = ""
    approval: ApprovalRequest = field(default_factory=ApprovalRequest)
    progress: ProgressSink | None = None
    """Where live progress goes (ExecuteStream); None when nobody listens."""
    turn_id: str = ""
    """Single calls that name the same turn (per session) share a turn budget."""

    @functools.cached_property
    def input_chars(self) -> int:
        """About how many characters the input as sent holds, counted up to LARGE_VALUE_CHARS
        (`approximate_chars`)."""
        return approximate_chars(self.tool_use.input, LARGE_VALUE_CHARS)

    @functools.cached_property
    def input_sha256(self) -> str:
        """Canonical hash of the input as sent (computed once: audit and idempotency share it)."""
        return canonical_input_hash(
            self.tool_use.input, large=self.input_chars >= LARGE_VALUE_CHARS
        )


@dataclass(frozen=True)
class RejectedCall:
    """A call that failed look-up or validation: the model gets `error`, nothing runs."""

    request: CallRequest
    session: Session
    started: float
    """Monotonic time the call arrived."""
    error: str
    known_tool: bool
    """The tool exists (the input was what was wrong)."""
    summary: str = ""
    """What the audit says happened (empty: the tool is unknown or its input invalid)."""

    concurrency_safe = False
    """Runs alone, like any call whose effects are unknown."""
    cancels_siblings = False
    shares_work = False


@dataclass(frozen=True)
class ReadyCall:
    """A call whose tool exists and whose input is valid: ready to decide and run."""

    request: CallRequest
    session: Session
    started: float
    call: ToolCall
    peers: PeerHandle | None = None
    """Set by the scheduler for a parallel group's calls that may share work."""
    audited_input: Any = None
    """The input as the audit logs it (masked once, when the call was checked, with the mask
    of that time; a long command is parsed for it in a worker thread only)."""

    @property
    def concurrency_safe(self) -> bool:
        """May run beside other concurrency-safe calls."""
        return self.call.facts.concurrency_safe

    @property
    def cancels_siblings(self) -> bool:
        """Its failure cancels its running parallel siblings."""
        return self.call.tool.traits.cancels_siblings

    @property
    def shares_work(self) -> bool:
        """May share a piece of work with parallel siblings."""
        return self.call.tool.traits.shares_work


PreparedCall = ReadyCall | RejectedCall


def _audit_paths(prepared: PreparedCall) -> frozenset[str]:
    """The input fields the audit shows as sent besides the common path names (the tool's)."""
    return prepared.call.tool.audit_paths if isinstance(prepared, ReadyCall) else frozenset()


def answered_call(prepared: PreparedCall) -> AnsweredCall:
    """A call as PostToolBatch hooks read it: the validated input when it had one."""
    tool_use = prepared.request.tool_use
    if isinstance(prepared, ReadyCall):
        return AnsweredCall(prepared.call.tool.name, prepared.call.input_json, tool_use.id)
    return AnsweredCall(tool_use.name, tool_use.input, tool_use.id)


@dataclass(frozen=True)
class PipelineLimits:
    """The daemon's own bounds on every call."""

    result_budget_chars: int
    default_sandbox: SandboxLimits
    ceilings: SandboxCeilings


@dataclass
class _Trace:
    """What one run measured and collected, for metrics and the audit."""

    timings: dict[str, float] = field(default_factory=dict)
    """decision_s and exec_s once measured."""
    hook_records: list[dict[str, Any]] = field(default_factory=list)
    """What each hook said."""
    approved_by: str = ""
    """Who approved the call, when it ran with an approval."""
    effective_input: dict[str, Any] | None = None
    """The input the call was decided and run with, when a PreToolUse hook rewrote it."""
    rewritten_by: list[str] = field(default_factory=list)
    """The hooks that rewrote the input."""
    system_messages: list[str] = field(default_factory=list)
    """What hooks said for the user (sent beside the answer)."""
    timeline: Timeline | None = None
    """Where the call's time went (the phase metrics)."""
    answered: bool = False
    """Its answered record is written."""

    def audit_fields(self, mask: AuditMask, paths: frozenset[str]) -> dict[str, Any]:
        """What the audit adds about approvals and rewrites, when there were any (`paths`: the
        tool's `audit_paths`)."""
        fields: dict[str, Any] = {}
        if self.approved_by:
            fields["approved_by"] = self.approved_by
        if self.effective_input is not None:
            fields["effective_input"] = mask.apply(self.effective_input, paths=paths)
            fields["input_rewritten_by"] = self.rewritten_by
        return fields


OFF_LOOP_INPUT_CHARS = 4096
"""Inputs from this size on are checked in a worker thread (below, the thread costs more)."""


def _one_line(text: str, limit: int = 200) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _error(tool_use_id: str, text: str) -> ToolResult:
    return ToolResult(tool_use_id=tool_use_id, content=(TextContent(text=text),), is_error=True)


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


class Pipeline:
    """Runs tool calls through the lifecycle."""

    def __init__(
        self,
        registry: ToolRegistry,
        policy: PolicyEngine,
        sessions: SessionStore,
        limits: PipelineLimits,
        audit: AuditLog,
        sandbox: SandboxProvider | None = None,
        approvals: ApprovalAuthority | None = None,
        metrics: Metrics | None = None,
        hooks: HookEngine | None = None,
        kept: KeptOutputs | None = None,
        own_defaults: OwnDefaults | None = None,
    ) -> None:
        self._own_defaults = own_defaults
        self._metrics = metrics
        self._kept = kept
        self._hooks = HookStage(hooks)
        self.batch_hooks = BatchHooks(
            hooks, audit, policy.audit_mask.apply, limits.result_budget_chars
        )
        """The PostToolBatch hooks, run by the scheduler once a batch answered."""
        self._registry = registry
        self._policy = policy
        self._gate = PolicyGate(policy, approvals)
        self.pending_approvals = self._gate.pending
        """The asks waiting for an approver (daemon.calls.approvals)."""
        self._sessions = sessions
        self._limits = limits
        self._audit = audit
        self._sandbox = sandbox

    def use_registry(self, registry: ToolRegistry) -> None:
        """Serve these tools from now on (a policy reload changed the operator's tools); calls
        already prepared finish with the tool they were prepared with."""
        self._registry = registry

    async def list_tools(
        self, session_id: str, caller: Caller, *, include_deferred: bool = False
    ) -> list[ToolDefinition]:
        """The enabled tools this caller may see, in registry order (deferred ones on request)."""
        await self._default_ready(session_id, caller)
        session = self._sessions.get(session_id, caller.principal, admin=caller.admin)
        definitions = [self._registry.definition(t.name) for t in self._registry.enabled()]
        visible = await self._policy.visible_tools(listing_document(definitions, session, caller))
        if visible is None:
            raise Unavailable("the policy engine cannot be reached; retry ListTools later")
        shown = [
            d
            for d in definitions
            if d.name in visible
            # A sandboxed tool cannot run without a sandbox: the model is not offered it.
            and (not d.traits.sandboxed or (self._sandbox is not None and self._sandbox.available))
            and (include_deferred or not d.defer_loading or d.name in session.discovered)
        ]
        if not include_deferred and not any(
            d.defer_loading and d.name not in session.discovered
            for d in definitions
            if d.name in visible
        ):
            # Nothing left to find: ToolSearch would only cost the model a tool definition.
            shown = [d for d in shown if d.name != ToolSearchTool.name]
        return shown

    async def prepare_off_loop(self, request: CallRequest, caller: Caller) -> PreparedCall:
        """Look up the caller's session and validate, without side effects (NotFound for a
        session that is not the caller's); failures are kept as a RejectedCall. A large
        input's checks (a long Bash line's analysis takes up to a quarter of a second), and
        paths the event loop cannot look up from the kernel's caches (NeedsThread), are done
        in one of the session owner's threads, so other callers are served meanwhile. The
        session is looked up here, on the event loop, as everything else that changes them."""
        await self._default_ready(request.session_id, caller)
        started, session, tool = self._lookup(request, caller)
        chars = request.input_chars
        large = chars >= LARGE_VALUE_CHARS
        if tool is None:
            if large:
                await asyncio.to_thread(getattr, request, "input_sha256")
            return self._unknown_tool(request, session, started)
        if not tool.prepares_off_loop and chars < OFF_LOOP_INPUT_CHARS:
            try:
                return self._checked(request, session, started, tool)
            except NeedsThread:
                pass
        try:
            # Before a thread looks its paths up by name: a workspace the kernel already knows
            # is gone is not looked into (another mount there may never answer).
            session.check_workspace_on_loop()
        except ToolError as exc:
            summary = f"{tool.name}: the workspace was moved"
            return RejectedCall(request, session, started, str(exc), True, summary)
        return await FILESYSTEM_THREADS.run(
            session.owner, lambda: self._checked(request, session, started, tool, in_thread=True)
        )

    async def _default_ready(self, session_id: str, caller: Caller) -> None:
        if self._own_defaults is not None:
            await self._own_defaults.ready(session_id, caller.principal)

    def _lookup(
        self, request: CallRequest, caller: Caller
    ) -> tuple[float, Session, AnyTool | None]:
        started = time.monotonic()
        session = self._sessions.get(request.session_id, caller.principal, admin=caller.admin)
        return started, session, self._registry.get(request.tool_use.name)

    def _unknown_tool(self, request: CallRequest, session: Session, started: float) -> RejectedCall:
        name = request.tool_use.name
        shown = repr(name) if len(name) <= 80 else f"{name[:80]!r}… ({len(name)} characters)"
        # The tools this caller may use are added when it is answered (that asks the policy).
        return RejectedCall(request, session, started, f"Unknown tool {shown}.", known_tool=False)

    async def _offered(self, prepared: RejectedCall, caller: Caller) -> str:
        """What an unknown tool's caller may call instead: the tools it sees, none it may not."""
        try:
            names = [d.name for d in await self.list_tools(prepared.session.id, caller)]
        except (Unavailable, NotFound):
            return " The tools you may use cannot be listed right now; retry shortly."
        return f" The tools you may use are: {', '.join(names)}. Call one of those instead."

    def _checked(
        self,
        request: CallRequest,
        session: Session,
        started: float,
        tool: AnyTool,
        in_thread: bool = False,
    ) -> PreparedCall:
        """The call validated, and its input as the audit logs it. `in_thread` (a large input
        or a tool that prepares off the loop, in a worker thread): also the hashes needed later
        (audit, idempotency, approval binding, refusal counts), which would otherwise be
        computed on the event loop, and a command masked with the bounded parser."""
        tool_use = request.tool_use
        if in_thread:
            _ = request.input_sha256
        try:
            call = ToolCall.prepare(tool, tool_use.input, session, tool_use.id)
        except ToolError as exc:
            return RejectedCall(request, session, started, str(exc), known_tool=True)
        if in_thread and call.large_input:
            _ = call.input_hash
        parse = functools.partial(parse_bounded, owner=session.owner) if in_thread else None
        audited = self._policy.audit_mask.apply(tool_use.input, paths=tool.audit_paths, parse=parse)
        return ReadyCall(request, session, started, call, audited_input=audited)

    async def execute(self, request: CallRequest, caller: Caller) -> ExecuteOutcome:
        """Run one call through every step; never raises for anything the model did."""
        return await self.run(await self.prepare_off_loop(request, caller), caller)

    async def run(self, prepared: PreparedCall, caller: Caller) -> ExecuteOutcome:
        """Decide, execute, map, fit and audit a prepared call. Every line logged meanwhile
        carries the call's session and tool_use id (and its decision id once decided)."""
        tool_use = prepared.request.tool_use
        with (
            log_context(session=prepared.session.id, tool_use_id=tool_use.id),
            timeline.recording(prepared.started) as trace_timeline,
        ):
            timeline.mark("prepare")
            trace = _Trace(timeline=trace_timeline)
            try:
                return await self._run_traced(prepared, trace, caller)
            except asyncio.CancelledError:
                # Cancelled before it answered, or even decided (a batch's sibling failed, the
                # caller went away): still its answered record.
                if not trace.answered:
                    self.audit_not_run(prepared, caller, "cancelled before it ran")
                raise

    async def _run_traced(
        self, prepared: PreparedCall, trace: _Trace, caller: Caller
    ) -> ExecuteOutcome:
        tool_use = prepared.request.tool_use
        if isinstance(prepared, RejectedCall):
            if prepared.session.closed:
                text = "This session was closed before the call could run, so nothing ran."
                result = _error(tool_use.id, text)
                return self._finish(prepared, trace, caller, None, result, summary="closed")
            summary = prepared.summary or (
                f"{tool_use.name}: invalid input"
                if prepared.known_tool
                else f"Unknown tool {tool_use.name}"
            )
            error = prepared.error
            if not prepared.known_tool:
                error += await self._offered(prepared, caller)
            # Its text quotes the input: held to the budget like any result.
            shown = fit_text(error, self._limits.result_budget_chars).text
            result = _error(tool_use.id, shown)
            return self._finish(prepared, trace, caller, None, result, summary=summary)
        return await self._run_ready(prepared, trace, caller)

    async def _run_ready(
        self, prepared: ReadyCall, trace: _Trace, caller: Caller
    ) -> ExecuteOutcome:
        tool_use = prepared.request.tool_use
        try:
            # Nothing (hook, host-side tool, container) works in a workspace that is no longer
            # the directory the session was opened on.
            await prepared.session.verify_workspace()
        except ToolError as exc:
            summary = f"{tool_use.name}: the workspace was moved"
            result = _error(tool_use.id, str(exc))
            return self._finish(prepared, trace, caller, None, result, summary=summary)
        if prepared.call.stale:
            # A call before it (a `cd`, a link made earlier in its batch or while it waited for
            # the session) changed what its paths name: it is analysed again now, under the
            # session's lock, and that is what is judged.
            try:
                again = await FILESYSTEM_THREADS.run(
                    prepared.session.owner, lambda: prepared.call.with_input(tool_use.input)
                )
            except ToolError as exc:
                summary = f"{tool_use.name}: invalid input"
                result = _error(tool_use.id, str(exc))
                return self._finish(prepared, trace, caller, None, result, summary=summary)
            prepared = dataclasses.replace(prepared, call=again)
        try:
            hooked = await self._hooks.before(prepared.call)
        except ToolError as exc:
            text = f"A PreToolUse hook rewrote the input into one that is not valid: {exc}"
            summary = f"{tool_use.name}: hook rewrote an invalid input"
            result = _error(tool_use.id, text)
            return self._finish(prepared, trace, caller, None, result, summary=summary)
        call = hooked.call
        timeline.mark("hooks")
        trace.system_messages.extend(hooked.outcome.system_messages)
        trace.hook_records.extend(hooked.outcome.to_audit())
        if hooked.outcome.updated_input is not None:
            trace.effective_input = call.input_json
            trace.rewritten_by = [
                r.name for r in hooked.outcome.results if r.updated_input is not None
            ]

        decision_started = time.monotonic()
        gate = await self._gate.decide(
            call, caller, prepared.request.approval, hooked.outcome.to_policy()
        )
        verdict = self._hooks.enforce(gate.verdict, hooked.outcome)
        if verdict.outcome is Outcome.ASK and gate.approval_token:
            gate = await self._permission_hooks(
                call, caller, gate, trace, hooked.outcome.to_policy()
            )
            verdict = self._hooks.enforce(gate.verdict, hooked.outcome)
        trace.approved_by = gate.approved_by
        decided_by_policy = gate.verdict.by_policy
        if not verdict.decision_id:  # none when the daemon decided itself
            verdict = dataclasses.replace(verdict, decision_id=uuid.uuid4().hex)
        trace.timings["decision_s"] = time.monotonic() - decision_started
        timeline.mark("decision")
        with log_context(decision_id=verdict.decision_id):
            if verdict.outcome is not Outcome.ALLOW:
                if decided_by_policy:  # not the daemon failing closed (OPA away): no count
                    call.session.record_refusal(
                        call.tool.name,
                        "ask" if verdict.outcome is Outcome.ASK else "deny",
                        call.input_hash,
                    )
                result = _error(tool_use.id, _refusal_text(call.tool.name, verdict))
                word = "needs approval" if verdict.outcome is Outcome.ASK else "denied by policy"
                # A hook's deny may override the policy's ask: then no token is handed out.
                token = gate.approval_token if verdict.outcome is Outcome.ASK else ""
                return self._finish(
                    prepared,
                    trace,
                    caller,
                    verdict,
                    result,
                    approval_token=token,
                    summary=f"{call.tool.name} {word}",
                )
            return await self._execute(prepared, call, hooked.outcome, verdict, trace, caller)

    async def _execute(
        self,
        prepared: ReadyCall,
        call: ToolCall,
        hooks: PreHookOutcome,
        verdict: Verdict,
        trace: _Trace,
        caller: Caller,
    ) -> ExecuteOutcome:
        tool = call.tool
        limits = clamp_limits(verdict.limits or self._limits.default_sandbox, self._limits.ceilings)
        # Nothing a redacting hook has not seen may reach the caller: no live output at all.
        redacting = self._hooks.redacting(call)
        progress = None if redacting else prepared.request.progress
        budget = min(tool.traits.max_result_chars, self._limits.result_budget_chars)
        if verdict.result_budget_chars is not None:
            budget = min(budget, verdict.result_budget_chars)
        ctx = CallContext(
            tool_use_id=call.tool_use_id,
            session=call.session,
            facts=call.facts,
            limits=limits,
            sandbox=self._sandbox.runner(
                call.session,
                call.tool_use_id,
                # Only a call on the egress network has connections to decide.
                EgressCall(call.tool_use_id, egress_call_facts(call, caller), progress)
                if limits.network is NetworkMode.EGRESS
                else None,
            )
            if self._sandbox is not None and tool.traits.sandboxed
            else None,
            progress=progress,
            catalog=lambda: self.list_tools(call.session.id, caller, include_deferred=True),
            peers=prepared.peers,
            shells=self._sandbox.shells
            if self._sandbox is not None and tool.traits.sandboxed
            else None,
            background=verdict.background,
        )
        if not call.facts.read_only:
            # On file before it runs: a call that may change something and is cut short by a
            # crash still has its allow recorded.
            self._audit.write(
                {
                    **self._audit_record(prepared, caller, verdict, AuditEvent.DECIDED),
                    **trace.audit_fields(self._policy.audit_mask, tool.audit_paths),
                }
            )
            timeline.mark("audit")
        exec_started = time.monotonic()
        with self._metrics.in_flight() if self._metrics else contextlib.nullcontext():
            try:
                ran = await run_call(call, ctx)
            except asyncio.CancelledError:
                # Every call has one answered record, an interrupted one too (attacker round 96:
                # a cancelled call had only its decided record, and no end in the audit).
                self._audit_cancelled(prepared, trace, caller, verdict, "running")
                self._hooks.interrupted(
                    call, functools.partial(self._audit_interrupted, prepared, caller, verdict)
                )
                raise
            finally:
                if not call.facts.read_only:
                    call.session.changes += 1
        trace.timings["exec_s"] = time.monotonic() - exec_started
        timeline.mark("tool_end")
        try:
            output = ran.output
            sandbox_notes = ctx.sandbox.notes() if ctx.sandbox is not None else []
            produced = output.content
            if redacting and sandbox_notes:
                # The network's notes quote destinations the command chose: the hook sees them too.
                produced = [*produced, TextContent(text="\n\n" + "\n".join(sandbox_notes))]
                sandbox_notes = []
            after = await self._hooks.after(call, hooks, produced, output.is_error)
            trace.hook_records.extend(after.records)
            trace.system_messages.extend(after.system_messages)
            notes = [*after.notes, *sandbox_notes]
            content, fitted = fit_with_notes(after.content, notes, budget, output.keep)
            kept = None
            if fitted.truncated and tool.keeps_over_budget and self._kept is not None:
                whole = text_of(after.content)
                kept = await self._kept.keep(call.session, call.tool_use_id, whole)
                if kept is not None:
                    call.session.kept_outputs = kept.path.parent
                    content, _ = fit_with_notes(
                        with_preview(after.content, kept, whole, budget, notes),
                        notes,
                        budget,
                        output.keep,
                    )
            report = ExecutionReport(
                sandboxed=tool.traits.sandboxed,
                sandbox_id=output.sandbox_id,
                exit_code=output.exit_code,
                timed_out=output.timed_out,
                oom_killed=output.oom_killed,
                duration_ms=int((time.monotonic() - exec_started) * 1000),
                truncated=fitted.truncated,
                original_chars=fitted.original_chars,
                kept_output=str(kept.path) if kept is not None else "",
            )
            result = ToolResult(
                tool_use_id=call.tool_use_id, content=content, is_error=after.is_error
            )
            summary = _one_line(ran.summary(call))
        except asyncio.CancelledError:
            # Cancelled while its answer was made (PostToolUse hooks, a kept output written):
            # the call ran, and still gets its answered record (attacker round 98).
            self._audit_cancelled(prepared, trace, caller, verdict, "answering")
            raise
        except Exception as exc:
            # Failed there (the caller gets an internal error): still its answered record.
            self._audit_unfinished(
                prepared,
                trace,
                caller,
                verdict,
                failed_while="answering",
                error=type(exc).__name__,
            )
            raise
        # Outside: it writes the answered record itself.
        return self._finish(prepared, trace, caller, verdict, result, report, summary=summary)

    async def _permission_hooks(
        self,
        call: ToolCall,
        caller: Caller,
        gate: GateDecision,
        trace: _Trace,
        pre_hooks: list[dict[str, str]],
    ) -> GateDecision:
        """Let PermissionRequest hooks answer an ask as an approver would: a deny is the
        approver's deny, an allow an approval the policy then decides on (it sees who). When
        neither holds (the policy refuses the hook's approval, a person answered meanwhile),
        the ask stands for a person, with its token."""
        try:
            await call.session.verify_workspace()  # hooks get the workspace's path
        except ToolError:
            return gate
        hooked = await self._hooks.permission(call, gate.verdict.reasons)
        if hooked is None:
            return gate
        trace.hook_records.extend(result.to_audit() for result in hooked.results)
        trace.system_messages.extend(hooked.system_messages)
        if hooked.decision is Outcome.ALLOW:
            approved = await self._gate.decide_hook_approval(
                call, caller, gate, hooked.decided_by, pre_hooks
            )
            return approved or gate
        if hooked.decision is Outcome.DENY:
            reason = "; ".join(hooked.reasons) or "A PermissionRequest hook denied the call."
            try:
                self.pending_approvals.decide(
                    gate.approval_id, AskState.DENIED, hooked.decided_by, note=reason
                )
            except (NotFound, RequestError):
                return gate  # a person answered first: the retry with the token gets it
            return GateDecision(Verdict.deny(reason, gate.verdict.decision_id))
        return gate

    def _audit_cancelled(
        self, prepared: ReadyCall, trace: _Trace, caller: Caller, verdict: Verdict, stage: str
    ) -> None:
        """The answered record of a call cancelled while `stage` ("running", "answering")."""
        self._audit_unfinished(
            prepared, trace, caller, verdict, cancelled=True, cancelled_while=stage
        )

    def _audit_unfinished(
        self,
        prepared: ReadyCall,
        trace: _Trace,
        caller: Caller,
        verdict: Verdict,
        **why: object,
    ) -> None:
        """The answered record of a call that ran, or began to, and had no answer of its own."""
        trace.answered = True
        self._audit.write(
            {
                **self._audit_record(prepared, caller, verdict, AuditEvent.ANSWERED),
                "is_error": True,
                **why,
                "duration_ms": int((time.monotonic() - prepared.started) * 1000),
            }
        )

    def _audit_interrupted(
        self,
        prepared: ReadyCall,
        caller: Caller,
        verdict: Verdict,
        records: list[dict[str, Any]],
    ) -> None:
        """The hooks that ran after a call was interrupted (its own answer is written apart)."""
        self._audit.write(
            {
                **self._audit_record(prepared, caller, verdict, AuditEvent.INTERRUPTED_HOOKS),
                "hooks": self._policy.audit_mask.apply(records),
            }
        )

    async def fit_turn(
        self, prepared: PreparedCall, outcome: ExecuteOutcome, room: int
    ) -> ExecuteOutcome:
        """The answer in at most `room` characters, for its turn's budget: kept whole and
        previewed when it can be (not already kept), else cut."""
        text = outcome.result.text()
        kept = None
        keeps = isinstance(prepared, ReadyCall) and prepared.call.tool.keeps_over_budget
        if self._kept is not None and keeps and not outcome.report.kept_output:
            kept = await self._kept.keep(prepared.session, prepared.request.tool_use.id, text)
        blocks = list(outcome.result.content)
        if kept is not None:
            prepared.session.kept_outputs = kept.path.parent
            blocks = with_preview(blocks, kept, text, room, ())
        content, _ = fit_content(blocks, room)
        report = outcome.report.model_copy(
            update={
                "truncated": True,
                "kept_output": str(kept.path) if kept else outcome.report.kept_output,
            }
        )
        result = outcome.result.model_copy(update={"content": content})
        self._audit.write(
            {
                "event": AuditEvent.TURN_BUDGET.value,
                "time": time.time(),
                "session": prepared.session.id,
                "tool_use_id": prepared.request.tool_use.id,
                "tool": self._logged_name(prepared),
                "chars": len(text),
                "room": room,
                "kept_output": report.kept_output,
            }
        )
        return outcome.model_copy(update={"result": result, "report": report})

    def audit_not_run(self, prepared: PreparedCall, caller: Caller, why: str) -> None:
        """The answered record of a call answered without having run (`why`: what stopped it
        first; attacker round 154: a call of a turn whose group had failed had no record)."""
        self._audit.write(
            {
                **self._audit_record(prepared, caller, None, AuditEvent.ANSWERED),
                "is_error": True,
                "not_run": why,
                "duration_ms": int((time.monotonic() - prepared.started) * 1000),
            }
        )

    def audit_replay_cancelled(self, prepared: PreparedCall, caller: Caller) -> None:
        """Record that a retry waiting for the same call to answer was cancelled (the call's own
        answered record says how it ended)."""
        self._audit.write(
            {**self._audit_record(prepared, caller, None, AuditEvent.REPLAYED), "cancelled": True}
        )

    def audit_replay(self, prepared: PreparedCall, caller: Caller, outcome: ExecuteOutcome) -> None:
        """Record that a retry got the remembered answer of the call that ran (idempotency)."""
        self._audit.write(
            {
                **self._audit_record(prepared, caller, None, AuditEvent.REPLAYED),
                "decision_id": outcome.decision.decision_id,
                "outcome": outcome.decision.outcome.value if outcome.decision.outcome else "",
                "is_error": outcome.result.is_error,
            }
        )

    def _logged_name(self, prepared: PreparedCall) -> str:
        """The tool's name as the audit shows it: a name no tool has is text the caller chose,
        masked like any (attacker round 158: a secret in it was logged in clear)."""
        name = prepared.request.tool_use.name
        if isinstance(prepared, RejectedCall) and not prepared.known_tool:
            return self._policy.audit_mask.hide_secrets(name)
        return name

    def _audit_record(
        self,
        prepared: PreparedCall,
        caller: Caller,
        verdict: Verdict | None,
        event: AuditEvent,
        decision_id: str = "",
    ) -> dict[str, Any]:
        """The fields every audit record of a call has, as known once it is decided."""
        tool_use = prepared.request.tool_use
        reused = verdict.cached_from if verdict else ""
        return {
            "event": event.value,
            "time": time.time(),
            "decision_id": verdict.decision_id if verdict else decision_id,
            "principal": caller.principal,
            "session": prepared.session.id,
            "tool_use_id": tool_use.id,
            "tool": self._logged_name(prepared),
            "input_sha256": prepared.request.input_sha256,
            "input": (
                prepared.audited_input
                if isinstance(prepared, ReadyCall)
                else self._policy.audit_mask.apply(tool_use.input, runs=False)
            ),
            "outcome": verdict.outcome.value if verdict else "not_evaluated",
            # Reasons quote the command: secrets in it are hidden here too.
            "reasons": self._policy.audit_mask.apply(list(verdict.reasons)) if verdict else [],
            "policy_revision": self._gate.revision if verdict else "",
            # A reused verdict: the id of the decision it repeats (its own audit records).
            **({"decision_cached_from": reused} if reused else {}),
        }

    def _finish(
        self,
        prepared: PreparedCall,
        trace: _Trace,
        caller: Caller,
        verdict: Verdict | None,
        result: ToolResult,
        report: ExecutionReport | None = None,
        *,
        approval_token: str = "",
        summary: str = "",
    ) -> ExecuteOutcome:
        timeline.mark("answer")
        trace.answered = True
        report = report or ExecutionReport()
        # Every verdict has a decision id by now; a call never decided gets one here.
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
                **self._audit_record(prepared, caller, verdict, AuditEvent.ANSWERED, decision_id),
                "is_error": result.is_error,
                "truncated": report.truncated,
                "duration_ms": int((time.monotonic() - prepared.started) * 1000),
                # Hooks quote inputs in their reasons and messages: masked like the input.
                **(
                    {"hooks": self._policy.audit_mask.apply(trace.hook_records)}
                    if trace.hook_records
                    else {}
                ),
                **trace.audit_fields(self._policy.audit_mask, _audit_paths(prepared)),
            }
        )
        timeline.mark("audit_answer")
        outcome = ExecuteOutcome(
            result=result,
            decision=decision,
            report=report,
            summary=_one_line(summary),
            turn_budget_chars=verdict.turn_budget_chars if verdict else None,
            system_messages=tuple(trace.system_messages),
        )
        log.debug(
            "answered %s: %s",
            prepared.request.tool_use.name,
            summary,
            extra={"outcome": decision.outcome.value if decision.outcome else "not_evaluated"},
        )
        if self._metrics is not None:
            self._metrics.observe_call(
                prepared.request.tool_use.name,
                CallOutcome.of(outcome),
                decision_s=trace.timings.get("decision_s"),
                exec_s=trace.timings.get("exec_s"),
                truncated=report.truncated,
                decision_reused=bool(verdict and verdict.cached_from),
            )
            if trace.timeline is not None:
                self._metrics.observe_phases(
                    prepared.request.tool_use.name, trace.timeline.phases()
                )
        return outcome
