"""The policy engine interface the pipeline depends on (OPA implements it; tests may fake it)."""

from __future__ import annotations

import abc
from pathlib import Path
from typing import Any, Literal

from daemon.models import Caller, Outcome
from daemon.policy.egress_verdict import EgressVerdict
from daemon.policy.input import open_session_document, session_mode_document
from daemon.policy.mask import AuditMask
from daemon.policy.verdict import Verdict
from daemon.sessions.workspaces import Overlap

Admission = Literal["open_session", "session_mode_change", "approve"]
"""The policy's yes/no rules beside the call decision."""
RESTRICTING_MODES = frozenset({"default", "plan", "dontAsk"})
"""Permission modes that only take powers away."""


class PolicyEngine(abc.ABC):
    """Answers decisions for calls and which tools a caller may see."""

    @abc.abstractmethod
    async def decide(self, document: dict[str, Any]) -> Verdict:
        """The decision for one call; must fail closed (a deny) on any error."""

    @abc.abstractmethod
    async def visible_tools(self, document: dict[str, Any]) -> frozenset[str] | None:
        """Tool names the caller may see; None when the policy cannot answer (show none)."""

    @property
    def audit_mask(self) -> AuditMask:
        """What the audit log hides (data.tooljail.authz.mask and mask_patterns)."""
        return AuditMask()

    async def admit(self, rule: Admission, document: dict[str, Any]) -> Verdict:
        """A yes/no decision ({"allow", "reasons"}) of `rule`; must fail closed. The default,
        for engines without such rules: only modes that take powers away, nothing else."""
        if rule == "session_mode_change" and document.get("mode") in RESTRICTING_MODES:
            return Verdict(Outcome.ALLOW, (), None, None)
        return Verdict.deny(f"This policy engine has no {rule} rule, so the request is refused.")

    async def egress(self, document: dict[str, Any]) -> EgressVerdict:
        """The decision for one outbound connection of a sandboxed call; must fail closed."""
        return EgressVerdict.refuse(
            "This policy engine has no egress rule, so every connection is refused."
        )

    async def decide_workspace(self, document: dict[str, Any]) -> Verdict:
        """Whether a session may work in an existing directory."""
        return await self.admit("open_session", document)

    async def mode_refusal(
        self, mode: str, action: Literal["open", "change"], owner: str, caller: Caller
    ) -> str | None:
        """None when `caller` may put a session of `owner`'s in permission mode `mode`, else
        why not."""
        document = session_mode_document(mode, action, owner, caller)
        verdict = await self.admit("session_mode_change", document)
        return None if verdict.outcome is Outcome.ALLOW else " ".join(verdict.reasons)

    async def workspace_refusal(
        self, workspace: Path, overlaps: list[Overlap], caller: Caller
    ) -> str | None:
        """None when a session may work in the existing directory `workspace` (which overlaps
        the workspaces of these open sessions), else why not."""
        document = open_session_document(str(workspace), overlaps, caller)
        verdict = await self.decide_workspace(document)
        return None if verdict.outcome is Outcome.ALLOW else " ".join(verdict.reasons)

    @property
    @abc.abstractmethod
    def revision(self) -> str:
        """Revision of the policy in force."""
