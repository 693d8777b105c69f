"""The approvers' side of an ask: list what waits, approve or deny it, as the policy lets whom.

Every answer is asked of the policy (data.tooljail.authz.approve) with the approver and the ask,
and written to the audit log with both identities; the asking caller's retry then runs with the
approver recorded as `approved_by` (daemon.policy.gate).
"""

from __future__ import annotations

import asyncio
import time
from typing import Literal

from daemon.calls.audit import AuditEvent, AuditLog
from daemon.errors import PermissionDenied
from daemon.models import Caller, Outcome
from daemon.policy.approval import Scope
from daemon.policy.engine import PolicyEngine
from daemon.policy.input import AskFact, approval_document
from daemon.policy.pending import AskState, PendingApprovals, PendingAsk

MAX_NOTE_CHARS = 2000
MAX_LISTED = 200
"""The newest waiting asks a listing looks at (each is a policy question)."""


class ApprovalDesk:
    """Where approvers answer the asks of other callers."""

    def __init__(self, pending: PendingApprovals, policy: PolicyEngine, audit: AuditLog) -> None:
        self._pending = pending
        self._policy = policy
        self._audit = audit

    async def listed(self, caller: Caller) -> list[PendingAsk]:
        """The waiting asks this caller may answer (or, for its own, see)."""
        waiting = self._pending.listed()[-MAX_LISTED:]
        refusals = await asyncio.gather(
            *(self._refusal("list", "once", ask, caller) for ask in waiting)
        )
        return [ask for ask, refused in zip(waiting, refusals, strict=True) if refused is None]

    async def answer(
        self,
        approval_id: str,
        approve: bool,
        caller: Caller,
        *,
        scope: Scope = "once",
        note: str = "",
    ) -> PendingAsk:
        """Approve or deny a waiting ask, if the policy lets this caller."""
        ask = self._pending.get(approval_id)
        action: Literal["approve", "deny"] = "approve" if approve else "deny"
        if ask is not None and ask.state is AskState.PENDING:
            refused = await self._refusal(action, scope, ask, caller)
            if refused is not None:
                raise PermissionDenied(
                    f"the policy does not let {caller.principal} {action} this call: {refused}"
                )
        state = AskState.APPROVED if approve else AskState.DENIED
        # decide() raises NotFound / RequestError for unknown or already answered asks.
        answered = self._pending.decide(
            approval_id, state, caller.principal, scope=scope, note=note[:MAX_NOTE_CHARS]
        )
        self._audit.write(
            {
                "event": AuditEvent.APPROVAL_ANSWERED.value,
                "time": time.time(),
                "approval_id": answered.approval_id,
                "answer": answered.state.value,
                "scope": answered.scope,
                "approver": caller.principal,
                "principal": answered.principal,
                "session": answered.session_id,
                "tool_use_id": answered.tool_use_id,
                "tool": answered.tool,
                "note": answered.note,
            }
        )
        return answered

    async def _refusal(
        self,
        action: Literal["list", "approve", "deny"],
        scope: Scope,
        ask: PendingAsk,
        caller: Caller,
    ) -> str | None:
        fact = AskFact.model_construct(
            approval_id=ask.approval_id,
            principal=ask.principal,
            session=ask.session_id,
            tool=ask.tool,
            reasons=list(ask.reasons),
        )
        verdict = await self._policy.admit(
            "approve", approval_document(action, scope, fact, caller)
        )
        return None if verdict.outcome is Outcome.ALLOW else " ".join(verdict.reasons)
