"""Parsing what the policy returned. Anything missing, undefined or ill-typed is a deny."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
)

from daemon.models import Outcome
from daemon.tools.contract import BackgroundGrant
from sandbox.backend import GitAccess, NetworkMode, SandboxLimits


class _RawSandbox(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    timeout_ms: StrictInt = Field(gt=0)
    memory_mb: StrictInt = Field(gt=0)
    cpus: StrictFloat | StrictInt = Field(gt=0)
    pids: StrictInt = Field(gt=0)
    network: Literal["none", "egress", "bridge"]
    git: Literal["read_only", "writable"] = "read_only"


class _RawBackground(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    shells: StrictInt = Field(ge=0)
    timeout_ms: StrictInt = Field(gt=0)
    on_timeout: StrictBool = False


class _RawDecision(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    outcome: Literal["allow", "deny", "ask"]
    reasons: list[StrictStr]
    sandbox: _RawSandbox
    result_budget_chars: StrictInt = Field(gt=0)
    turn_budget_chars: StrictInt | None = Field(default=None, gt=0)
    cache_ttl_s: StrictFloat | StrictInt = Field(default=0, ge=0)
    background: _RawBackground | None = None


@dataclass(frozen=True)
class Verdict:
    """A usable decision from the policy engine (before the daemon's ceilings are applied)."""

    outcome: Outcome
    reasons: tuple[str, ...]
    limits: SandboxLimits | None
    """Requested sandbox limits (None on a deny produced by the daemon itself)."""
    result_budget_chars: int | None
    decision_id: str = ""
    turn_budget_chars: int | None = None
    """What all results of the call's turn may hold together (None: the daemon's default)."""
    cache_ttl_s: float = 0.0
    """How long the policy lets this verdict be reused for the identical input (0: never)."""
    cached_from: str = ""
    """Set on a reused verdict: the decision id of the evaluation it came from."""
    background: BackgroundGrant = field(default_factory=BackgroundGrant)
    """What the session may run in the background (none unless the policy says)."""
    by_policy: bool = False
    """A well-formed decision of the policy (its refusals count for the policy's repeated-refusal
    rules); False for everything the daemon decided itself (failing closed included)."""

    @classmethod
    def deny(cls, reason: str, decision_id: str = "") -> Verdict:
        """A deny the daemon produces itself (fail closed)."""
        return cls(Outcome.DENY, (reason,), None, None, decision_id)


def first_error(exc: ValidationError, whole: str) -> str:
    """Where the first problem of a malformed answer is, and what it is ("budget.bytes: ...")."""
    first = exc.errors(include_url=False)[0]
    where = ".".join(str(p) for p in first["loc"]) or whole
    return f"{where}: {first['msg']}"


def decision_id_of(response: dict[str, Any]) -> str:
    """OPA's id for the decision in `response`, or one of the daemon's: OPA names decisions only
    with decision logging on, and the audit (and a reused verdict) refers to every one by id."""
    decision_id = response.get("decision_id", "")
    return decision_id if isinstance(decision_id, str) and decision_id else uuid.uuid4().hex


def parse_verdict(response: dict[str, Any], base_limits: SandboxLimits) -> Verdict:
    """Turn an OPA data API response into a Verdict; never raises, never allows by accident."""
    decision_id = decision_id_of(response)
    if "result" not in response:
        return Verdict.deny(
            "The policy has no decision for this call (data.tooljail.authz.decision is undefined), "
            "so it is denied.",
            decision_id,
        )
    try:
        raw = _RawDecision.model_validate(response["result"])
    except ValidationError as exc:
        return Verdict.deny(
            f"The policy returned a malformed decision ({first_error(exc, 'decision')}), so the "
            "call is denied. The policy needs fixing.",
            decision_id,
        )
    limits = base_limits.model_copy(
        update={
            "timeout_ms": raw.sandbox.timeout_ms,
            "memory_mb": raw.sandbox.memory_mb,
            "cpus": float(raw.sandbox.cpus),
            "pids": raw.sandbox.pids,
            "network": NetworkMode(raw.sandbox.network),
            "git": GitAccess(raw.sandbox.git),
        }
    )
    reasons = tuple(dict.fromkeys(raw.reasons))
    outcome = Outcome(raw.outcome)
    if outcome is not Outcome.ALLOW and not reasons:
        reasons = (f"The policy decided {outcome.value} without giving a reason.",)
    return Verdict(
        outcome,
        reasons,
        limits,
        raw.result_budget_chars,
        decision_id,
        turn_budget_chars=raw.turn_budget_chars,
        cache_ttl_s=float(raw.cache_ttl_s),
        background=BackgroundGrant(
            shells=raw.background.shells,
            timeout_ms=raw.background.timeout_ms,
            on_timeout=raw.background.on_timeout,
        )
        if raw.background is not None
        else BackgroundGrant(),
        by_policy=True,
    )


class _RawWorkspaceDecision(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    allow: bool
    reasons: list[StrictStr] = []


def parse_admission(rule: str, response: dict[str, Any]) -> Verdict:
    """A yes/no rule's answer ({"allow", "reasons"}, e.g. data.tooljail.authz.open_session) as
    a Verdict (allow or deny); anything else is a deny."""
    if "result" not in response:
        return Verdict.deny(f"The policy has no {rule} rule, so the request is refused.")
    try:
        raw = _RawWorkspaceDecision.model_validate(response["result"])
    except ValidationError:
        return Verdict.deny(f"The policy returned a malformed {rule} decision; refused.")
    reasons = tuple(raw.reasons)
    if not raw.allow:
        return Verdict(Outcome.DENY, reasons or (f"The policy's {rule} rule refuses.",), None, None)
    return Verdict(Outcome.ALLOW, reasons, None, None)
