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
from daemon.errors import NotFound, PermissionDenied, RequestError
from daemon.models import Caller, Outcome
from daemon.policy.approval import Scope
from daemon.policy.engine import PolicyEngine
from daemon.policy.input import AskFact, approval_document
from daemon.policy.pending import AskState, PendingApprovals, PendingAsk, newest_per_asker

MAX_NOTE_CHARS = 2000
MAX_LISTED = 200
"""The waiting asks a listing looks at: the newest, shared among their askers."""
MAX_LISTING_QUERIES = 4
"""Policy questions listings ask at once, for the whole daemon."""


class ApprovalDesk:
    """Where approvers answer the asks of other callers."""

    def __init__(self, pending: PendingApprovals, policy: PolicyEngine, audit: AuditLog) -> None:
        self._pending = pending
        self._policy = policy
        self._audit = audit
        self._listing = asyncio.Semaphore(MAX_LISTING_QUERIES)

    async def listed(self, caller: Caller) -> list[PendingAsk]:
        """The waiting asks this caller may answer (or, for its own, see). The policy is asked
        once per asker and tool, a few questions at a time for the whole daemon, so listing
        cannot flood the policy engine the calls depend on."""
        waiting = newest_per_asker(self._pending.listed(), MAX_LISTED)
        verdicts: dict[tuple[str, str], bool] = {}
        for ask in waiting:
            group = (ask.principal, ask.tool)
            if group not in verdicts:
                async with self._listing:
                    verdicts[group] = await self._refusal("list", "once", ask, caller) is None
        return [ask for ask in waiting if verdicts[(ask.principal, ask.tool)]]

    async def answer(
        self,
        approval_id: str,
        approve: bool,
        caller: Caller,
        *,
        scope: Scope = "once",
        note: str = "",
    ) -> PendingAsk:
        """Approve or deny a waiting ask, if the policy lets this caller. Whoever may not
        answer an ask learns nothing about it (not even that it was answered)."""
        ask = self._pending.get(approval_id)
        action: Literal["approve", "deny"] = "approve" if approve else "deny"
        if ask is None:
            raise _unknown(approval_id)
        refused = await self._refusal(action, scope, ask, caller)
        if refused is not None:
            raise PermissionDenied(
                f"the policy does not let {caller.principal} {action} this call: {refused}"
            )
        if approve and not ask.reviewable:
            raise RequestError(
                f"the input of this call is {ask.input_chars} characters, more than can be "
                "shown for review, so it cannot be approved; deny it, and have the caller make "
                "a smaller call"
            )
        state = AskState.APPROVED if approve else AskState.DENIED
        # decide() raises RequestError for an ask answered meanwhile (and NotFound if expired).
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


def _unknown(approval_id: str) -> NotFound:
    return NotFound(
        f"no pending approval {approval_id[:100]!r}: it was never asked, already used, or "
        "expired; list the waiting ones with ListPendingApprovals"
    )
