"""The policy engine interface the pipeline depends on (OPA implements it; tests may fake it)."""

from __future__ import annotations

import abc
from pathlib import Path
from typing import Any

from daemon.models import Caller, Outcome
from daemon.policy.input import open_session_document
from daemon.policy.verdict import Verdict
from daemon.sessions.workspaces import Overlap


class PolicyEngine(abc.ABC):
    """Answers decisions for calls and which tools a caller may see."""

    @abc.abstractmethod
    async def decide(self, document: dict[str, Any]) -> Verdict:
        """The decision for one call; must fail closed (a deny) on any error."""

    @abc.abstractmethod
    async def visible_tools(self, document: dict[str, Any]) -> frozenset[str] | None:
        """Tool names the caller may see; None when the policy cannot answer (show none)."""

    @property
    def audit_mask(self) -> frozenset[str]:
        """Input field names whose values the audit log masks (data.tooljail.authz.mask)."""
        return frozenset()

    async def decide_workspace(self, document: dict[str, Any]) -> Verdict:
        """Whether a session may work in an existing directory (default: never)."""
        del document
        return Verdict.deny("This policy engine does not allow sessions over existing directories.")

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
