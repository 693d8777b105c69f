"""The policy's answer for one outbound connection (data.tooljail.authz.egress).

Anything missing, undefined or ill-typed is a refusal, as for calls. The decision also says to
which ranges of address the connection may go (the proxy never connects elsewhere) and the call's
connection and byte budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationError

from daemon.policy.verdict import decision_id_of, first_error

AddressRange = Literal[
    "public",
    "loopback",
    "private",
    "link_local",
    "unique_local",
    "metadata",
    "multicast",
    "unspecified",
    "reserved",
]
"""The ranges an address can lie in (daemon/egress/addresses.py says which is which)."""


class _RawBudget(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    connections: StrictInt = Field(gt=0)
    bytes: StrictInt = Field(gt=0)


class _RawEgress(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    allow: StrictBool
    reasons: list[StrictStr] = []
    address_ranges: list[AddressRange] = ["public"]
    budget: _RawBudget | None = None
    opaque: StrictBool = False


@dataclass(frozen=True)
class EgressVerdict:
    """Whether one connection (or plain-HTTP request) may go out, and within what."""

    allow: bool
    reasons: tuple[str, ...]
    address_ranges: frozenset[str] = frozenset({"public"})
    """The address ranges the proxy may connect to for it."""
    max_connections: int | None = None
    """The call's connection budget, when the policy gives one."""
    max_bytes: int | None = None
    """The call's byte budget (both directions, all connections), when the policy gives one."""
    decision_id: str = ""
    opaque: bool = False
    """A tunnel may carry something other than TLS naming its host (e.g. ssh)."""

    @classmethod
    def refuse(cls, reason: str, decision_id: str = "") -> EgressVerdict:
        """A refusal the daemon produces itself (fail closed)."""
        return cls(False, (reason,), frozenset(), decision_id=decision_id)


def parse_egress(response: dict[str, Any]) -> EgressVerdict:
    """An OPA data API response as an EgressVerdict; never raises, never allows by accident."""
    decision_id = decision_id_of(response)
    if "result" not in response:
        return EgressVerdict.refuse(
            "The policy has no egress decision (data.tooljail.authz.egress is undefined), so the "
            "connection is refused.",
            decision_id,
        )
    try:
        raw = _RawEgress.model_validate(response["result"])
    except ValidationError as exc:
        return EgressVerdict.refuse(
            "The policy returned a malformed egress decision "
            f"({first_error(exc, 'egress')}), so the connection is refused. The policy needs "
            "fixing.",
            decision_id,
        )
    reasons = tuple(dict.fromkeys(raw.reasons))
    if not raw.allow and not reasons:
        reasons = ("The policy refused the connection without giving a reason.",)
    return EgressVerdict(
        allow=raw.allow,
        reasons=reasons,
        address_ranges=frozenset(raw.address_ranges),
        max_connections=raw.budget.connections if raw.budget else None,
        max_bytes=raw.budget.bytes if raw.budget else None,
        decision_id=decision_id,
        opaque=raw.opaque,
    )
