"""The policy gate: approval tokens around the engine's decision.

Order: a token that came with the call is verified (not yet used up) and shown to the policy as
`input.approval`; the policy decides; an ASK without a token issues one bound to this exact call;
an ALLOW with a token uses the token up just before the call runs. A bad token is a deny with the
precise reason, and a policy that still asks although a valid token came is a deny too (no loops).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from daemon.models import Caller, Outcome
from daemon.policy.approval import ApprovalAuthority, ApprovalError, Grant, canonical_input_hash
from daemon.policy.document import call_document
from daemon.policy.engine import PolicyEngine
from daemon.policy.verdict import Verdict
from daemon.session import Session, SessionGrant
from daemon.tools.contract import AnyTool, ToolInput, TouchedPath


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
        tool: AnyTool,
        args: ToolInput,
        paths: list[TouchedPath],
        session: Session,
        caller: Caller,
        tool_use_id: str,
        approval_token: str,
        approval_scope: str = "once",
        hooks: list[dict[str, str]] | None = None,
    ) -> GateDecision:
        """The decision for one call."""

        def binding() -> dict[str, Any]:
            """What a token is bound to (only needed with a token or for an ask)."""
            return {
                "session_id": session.id,
                "tool_use_id": tool_use_id,
                "input_hash": canonical_input_hash(args.model_dump(mode="json", by_alias=True)),
                "principal": caller.principal,
                "tool_name": tool.name,
            }

        grant: Grant | None = None
        if approval_token:
            if self._approvals is None:
                return GateDecision(Verdict.deny("Approval tokens are not enabled on this daemon."))
            try:
                grant = self._approvals.verify(approval_token, **binding())
            except ApprovalError as exc:
                return GateDecision(Verdict.deny(f"The approval token was refused: {exc}"))

        document = call_document(tool, args, paths, session, caller)
        document["approval"] = grant.policy_input() if grant else {"granted": False}
        if hooks:
            document["hooks"] = hooks
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
            if approval_scope == "session":
                self._grant_for_session(tool, args, session, grant)
        return GateDecision(verdict)

    @staticmethod
    def _grant_for_session(tool: AnyTool, args: ToolInput, session: Session, grant: Grant) -> None:
        """Remember the approval for the rest of the session (the policy sees it as a grant)."""
        covered = tool.grant_pattern(args)
        if covered is None:
            return
        pattern, words = covered
        if any(g.tool == tool.name and g.pattern == pattern for g in session.grants):
            return
        session.grants.append(
            SessionGrant(
                tool=tool.name,
                pattern=pattern,
                words=words,
                approved_by=grant.approved_by,
                granted_at=time.time(),
            )
        )
