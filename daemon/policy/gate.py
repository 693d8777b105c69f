"""The policy gate: approval tokens around the engine's decision.

Order: a token that came with the call is verified (not yet used up) and shown to the policy as
`input.approval`, with who approved it: the approver who answered the pending ask (Admin.Approve,
who also fixed the scope), or else the caller itself (`self_approved`, with the scope its retry
asks for; whether that counts is the policy's call); the policy decides; an ASK without a token
issues one bound to this exact call and lists the ask as pending; an ALLOW with a token uses the
token up just before the call runs. A bad token is a deny with the precise reason, an ask an
approver denied is a deny with the approver's words, and a policy that still asks although a
valid token came is a deny too (no loops).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, replace
from typing import Any, Literal

from daemon.errors import NotFound, RequestError
from daemon.models import Caller, Outcome
from daemon.policy.approval import ApprovalAuthority, ApprovalError, Grant, reasons_digest
from daemon.policy.engine import PolicyEngine
from daemon.policy.input import call_document
from daemon.policy.pending import MAX_REVIEW_CHARS, AskState, PendingApprovals, PendingAsk
from daemon.policy.verdict import Verdict
from daemon.sessions.session import SessionGrant
from daemon.text import printable
from daemon.tools.call import ToolCall


@dataclass(frozen=True)
class ApprovalRequest:
    """The approval a call came with."""

    token: str = ""
    """A token a human approved, from an earlier ASK answer; empty: none."""
    scope: Literal["", "once", "session"] = ""
    """With a token: this call only, or similar calls for the rest of the session; empty: as
    the approver decided (once, when the caller approves its own call)."""


@dataclass(frozen=True)
class GateDecision:
    """The verdict to enforce, and the approval token to hand out on ASK."""

    verdict: Verdict
    approval_token: str = ""
    approved_by: str = ""
    """Who approved the call (for the audit), when it carries an approval."""
    approval_id: str = ""
    """With an approval token handed out: the id of its pending ask."""


class PolicyGate:
    """Decides calls with the policy engine and manages approval tokens."""

    def __init__(
        self,
        engine: PolicyEngine,
        approvals: ApprovalAuthority | None,
        pending: PendingApprovals | None = None,
    ) -> None:
        self._engine = engine
        self._approvals = approvals
        self._pending = pending if pending is not None else PendingApprovals()

    @property
    def pending(self) -> PendingApprovals:
        """The asks waiting for an approver."""
        return self._pending

    @property
    def revision(self) -> str:
        """Revision of the policy in force."""
        return self._engine.revision

    async def decide(
        self,
        call: ToolCall,
        caller: Caller,
        approval: ApprovalRequest,
        hooks: list[dict[str, str]] | None = None,
    ) -> GateDecision:
        """The decision for one call."""

        grant: Grant | None = None
        if approval.token:
            if self._approvals is None:
                return GateDecision(Verdict.deny("Approval tokens are not enabled on this daemon."))
            try:
                grant = self._approvals.verify(approval.token, **_binding(call, caller))
            except ApprovalError as exc:
                return GateDecision(Verdict.deny(f"The approval token was refused: {exc}"))
            grant, refusal = self._approved(grant, approval, caller)
            if refusal:
                return GateDecision(Verdict.deny(refusal))

        approved_asks: tuple[str, ...] = ()
        if grant is not None:
            # An approval covers the asks its approver was shown, not others the call came to
            # raise since (analysed again after a link was swapped in, a hook's rewrite).
            unapproved = await self._engine.decide(call_document(call, caller, None, hooks or []))
            if unapproved.outcome is Outcome.ASK:
                if reasons_digest(unapproved.reasons) != grant.reasons:
                    return await self._ask(call, caller, unapproved, changed=True)
                approved_asks = unapproved.reasons

        document = call_document(call, caller, grant, hooks or [])
        verdict = await self._engine.decide(document)

        if verdict.outcome is Outcome.ASK:
            if grant is not None:
                return GateDecision(
                    Verdict.deny(
                        "The policy still asks for approval although this call carries a valid "
                        "approval token, so it is denied rather than asked again.",
                        verdict.decision_id,
                    )
                )
            return await self._ask(call, caller, verdict)
        if verdict.outcome is Outcome.ALLOW and grant is not None:
            assert self._approvals is not None
            try:
                self._approvals.consume(grant)
            except ApprovalError as exc:
                return GateDecision(
                    Verdict.deny(f"The approval token was refused: {exc}", verdict.decision_id)
                )
            self._pending.used(grant.token_id)
            if grant.scope == "session":
                _grant_for_session(call, grant, approved_asks)
            return GateDecision(verdict, approved_by=grant.approved_by)
        return GateDecision(verdict)

    async def _ask(
        self, call: ToolCall, caller: Caller, verdict: Verdict, changed: bool = False
    ) -> GateDecision:
        """The ask for a person, with a token for exactly this call and these asks."""
        asks = verdict.reasons
        if changed:
            verdict = replace(
                verdict,
                reasons=(
                    "This call now asks for more than was approved (it was analysed again and "
                    "what it does changed), so the approval does not cover it; it asks again:",
                    *verdict.reasons,
                ),
            )
        if self._approvals is None:
            return GateDecision(verdict)
        review = (
            await asyncio.to_thread(_for_review, call.input_json)
            if call.large_input
            else _for_review(call.input_json)
        )
        issued = self._approvals.issue(**_binding(call, caller), reasons=asks)
        self._pending.add(
            PendingAsk(
                approval_id=issued.token_id,
                principal=caller.principal,
                session_id=call.session.id,
                tool_use_id=call.tool_use_id,
                tool=call.tool.name,
                **review,
                reasons=verdict.reasons,
                asked_at=issued.issued_at,
                expires_at=issued.expires_at,
            )
        )
        return GateDecision(verdict, issued.token, approval_id=issued.token_id)

    async def decide_hook_approval(
        self,
        call: ToolCall,
        caller: Caller,
        asked: GateDecision,
        approver: str,
        hooks: list[dict[str, str]],
    ) -> GateDecision | None:
        """The decision on an asked call that a PermissionRequest hook (`approver`) approved:
        the policy decides with the hook as the approver. Only an allow uses the token up and
        answers the pending ask; otherwise None, and the ask stays for a person (the policy
        may refuse hook approvals, and a person may be answering it meanwhile)."""
        if self._approvals is None or not asked.approval_token:
            return None
        try:
            grant = self._approvals.verify(asked.approval_token, **_binding(call, caller))
        except ApprovalError:
            return None
        ask = self._pending.get(grant.token_id)
        if ask is None or ask.state is not AskState.PENDING:
            return None  # answered by a person meanwhile: their answer stands
        grant = replace(grant, approved_by=approver, self_approved=False, scope="once")
        verdict = await self._engine.decide(call_document(call, caller, grant, hooks))
        if verdict.outcome is not Outcome.ALLOW:
            return None
        try:
            self._pending.decide(grant.token_id, AskState.APPROVED, approver)
            self._approvals.consume(grant)
        except (ApprovalError, RequestError, NotFound):
            return None
        self._pending.used(grant.token_id)
        return GateDecision(verdict, approved_by=approver)

    def _approved(
        self, grant: Grant, approval: ApprovalRequest, caller: Caller
    ) -> tuple[Grant, str]:
        """Who approved the call the token is for, and in what scope; or why it is refused."""
        ask = self._pending.get(grant.token_id)
        if ask is None and self._pending.dropped(grant.token_id):
            return grant, (
                "This call's request for approval was dropped because its caller had too many "
                "waiting; it did not run. Send the call again without the token to ask anew."
            )
        if ask is None or ask.state is AskState.PENDING:
            # Nobody else answered: the caller approves its own call (the policy decides).
            return replace(grant, self_approved=True, scope=approval.scope or "once"), ""
        if ask.state is AskState.DENIED:
            note = f": {ask.note}" if ask.note else ""
            return grant, (
                f"{ask.decided_by} denied this call{note}. It did not run; do not retry it "
                "unchanged."
            )
        if approval.scope and approval.scope != ask.scope:
            return grant, (
                f"{ask.decided_by} approved this call with scope {ask.scope!r}, and the retry "
                f"asks for {approval.scope!r}; the approver decides the scope: resend the call "
                "with that scope or with none."
            )
        by = ask.decided_by
        return replace(
            grant, approved_by=by, self_approved=by == caller.principal, scope=ask.scope
        ), ""


def _binding(call: ToolCall, caller: Caller) -> dict[str, Any]:
    """What a token is bound to (only needed with a token or for an ask)."""
    return {
        "session_id": call.session.id,
        "tool_use_id": call.tool_use_id,
        "input_hash": call.input_hash,
        "principal": caller.principal,
        "tool_name": call.tool.name,
    }


def _for_review(tool_input: dict[str, Any]) -> dict[str, Any]:
    """The input as an approver sees it: exact (never masked or cut: what is hidden from the
    approver could be what runs), or nothing when too large to review."""
    text = json.dumps(tool_input, ensure_ascii=False, sort_keys=True, default=str)
    shown = printable(text) if len(text) <= MAX_REVIEW_CHARS else ""
    return {"input_json": shown, "input_chars": len(text)}


def _grant_for_session(call: ToolCall, grant: Grant, asks: tuple[str, ...]) -> None:
    """Remember the approval for the rest of the session (the policy sees it as a grant that
    lifts the approved `asks` only)."""
    covered = call.facts.grant
    if covered is None:
        return
    session = call.session
    if any(
        g.tool == call.tool.name and g.pattern == covered.pattern and g.reasons == asks
        for g in session.grants
    ):
        return
    session.grants.append(
        SessionGrant(
            tool=call.tool.name,
            pattern=covered.pattern,
            words=covered.words,
            approved_by=grant.approved_by,
            granted_at=time.time(),
            reasons=asks,
        )
    )
