"""Shadow mode: a candidate policy decides every call beside the serving one, without effect.

Decisions that differ are logged (one structured line each), so a team can see what a policy
change would do to real traffic before it serves. The candidate is evaluated in the background:
it never delays a call, and when it falls behind, comparisons are skipped (and counted) rather than
queued without bound.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from daemon.policy.engine import Admission, PolicyEngine
from daemon.policy.mask import AuditMask
from daemon.policy.verdict import Verdict

log = logging.getLogger(__name__)

MAX_PENDING = 64


class ShadowedEngine(PolicyEngine):
    """Serves `primary`'s decisions and compares them with `candidate`'s."""

    def __init__(self, primary: PolicyEngine, candidate: PolicyEngine) -> None:
        self._primary = primary
        self._candidate = candidate
        self._pending: set[asyncio.Task[None]] = set()
        self.compared = 0
        self.differed = 0
        self.skipped = 0

    @property
    def revision(self) -> str:
        return self._primary.revision

    @property
    def audit_mask(self) -> AuditMask:
        return self._primary.audit_mask

    async def decide(self, document: dict[str, Any]) -> Verdict:
        verdict = await self._primary.decide(document)
        if len(self._pending) >= MAX_PENDING:
            self.skipped += 1
        else:
            task = asyncio.create_task(self._compare(document, verdict))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)
        return verdict

    async def _compare(self, document: dict[str, Any], serving: Verdict) -> None:
        candidate = await self._candidate.decide(document)
        self.compared += 1
        if (candidate.outcome, candidate.reasons) == (serving.outcome, serving.reasons):
            return
        self.differed += 1
        log.warning(
            "shadow policy decides differently",
            extra={
                "tool": document.get("tool", {}).get("name"),
                "session": document.get("session", {}).get("id"),
                "serving_outcome": serving.outcome.value,
                "serving_reasons": list(serving.reasons),
                "shadow_outcome": candidate.outcome.value,
                "shadow_reasons": list(candidate.reasons),
                "serving_revision": self._primary.revision,
                "shadow_revision": self._candidate.revision,
            },
        )

    async def drain(self) -> None:
        """Wait for the comparisons in flight (tests and shutdown)."""
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)

    async def visible_tools(self, document: dict[str, Any]) -> frozenset[str] | None:
        return await self._primary.visible_tools(document)

    async def admit(self, rule: Admission, document: dict[str, Any]) -> Verdict:
        return await self._primary.admit(rule, document)
