"""The policy gate: approval tokens around the engine's decision.

Order: a token that came with the call is verified (not yet used up) and shown to the policy as
`input.approval`; the policy decides; an ASK without a token issues one bound to this exact call;
an ALLOW with a token uses the token up just before the call runs. A bad token is a deny with the
precise reason, and a policy that still asks although a valid token came is a deny too (no loops).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal

from daemon.models import Caller, Outcome
from daemon.policy.approval import ApprovalAuthority, ApprovalError, Grant, canonical_input_hash
from daemon.policy.engine import PolicyEngine
from daemon.policy.input import call_document
from daemon.policy.verdict import Verdict
from daemon.sessions.session import SessionGrant
from daemon.tools.call import ToolCall


@dataclass(frozen=True)
class ApprovalRequest:
    """The approval a call came with."""

    token: str = ""
    """A token a human approved, from an earlier ASK answer; empty: none."""
    scope: Literal["once", "session"] = "once"
    """With a token: this call only, or similar calls for the rest of the session."""


@dataclass(frozen=True)
class GateDecision:
    """The verdict to enforce, and the approval token to hand out on ASK."""

    verdict: Verdict
    approval_token: str = ""


class PolicyGate:
    """Decides calls with the policy engine and manages approval tokens."""

    def __init__(self, engine: PolicyEngine, approvals: ApprovalAuthority | None) -> None:
        self._engine = engine
        self._approvals = approvals

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

        def binding() -> dict[str, Any]:
            """What a token is bound to (only needed with a token or for an ask)."""
            return {
                "session_id": call.session.id,
                "tool_use_id": call.tool_use_id,
                "input_hash": canonical_input_hash(call.input_json),
                "principal": caller.principal,
                "tool_name": call.tool.name,
            }

        grant: Grant | None = None
        if approval.token:
            if self._approvals is None:
                return GateDecision(Verdict.deny("Approval tokens are not enabled on this daemon."))
            try:
                grant = self._approvals.verify(approval.token, **binding())
            except ApprovalError as exc:
                return GateDecision(Verdict.deny(f"The approval token was refused: {exc}"))

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
            if self._approvals is None:
                return GateDecision(verdict)
            issued = self._approvals.issue(**binding())
            return GateDecision(verdict, issued.token)
        if verdict.outcome is Outcome.ALLOW and grant is not None:
            assert self._approvals is not None
            try:
                self._approvals.consume(grant)
            except ApprovalError as exc:
                return GateDecision(
                    Verdict.deny(f"The approval token was refused: {exc}", verdict.decision_id)
                )
            if approval.scope == "session":
                _grant_for_session(call, grant)
        return GateDecision(verdict)


def _grant_for_session(call: ToolCall, grant: Grant) -> None:
    """Remember the approval for the rest of the session (the policy sees it as a grant)."""
    covered = call.facts.grant
    if covered is None:
        return
    session = call.session
    if any(g.tool == call.tool.name and g.pattern == covered.pattern for g in session.grants):
        return
    session.grants.append(
        SessionGrant(
            tool=call.tool.name,
            pattern=covered.pattern,
            words=covered.words,
            approved_by=grant.approved_by,
            granted_at=time.time(),
        )
    )
