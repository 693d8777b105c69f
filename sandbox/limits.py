"""The daemon's ceilings on container limits, and limits as granted under them."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from sandbox.backend import NetworkMode, SandboxLimits


class SandboxCeilings(BaseModel):
    """Hard limits a policy decision can never exceed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    timeout_ms: int = Field(default=600_000, gt=0)
    memory_mb: int = Field(default=4_096, gt=0)
    cpus: float = Field(default=2.0, gt=0)
    pids: int = Field(default=1_024, gt=0)
    allow_network: bool = False
    """Whether any policy may grant the bridge network (everything the host reaches)."""
    allow_egress: bool = True
    """Whether any policy may grant the egress network (each connection decided by the policy
    through the daemon's proxy)."""


def clamp_limits(requested: SandboxLimits, ceilings: SandboxCeilings) -> SandboxLimits:
    """Limits as granted: what the policy asked for, never above the daemon's ceilings."""
    allowed = {
        NetworkMode.NONE: True,
        NetworkMode.EGRESS: ceilings.allow_egress,
        NetworkMode.BRIDGE: ceilings.allow_network,
    }
    network = requested.network if allowed[requested.network] else NetworkMode.NONE
    return requested.model_copy(
        update={
            "timeout_ms": min(requested.timeout_ms, ceilings.timeout_ms),
            "memory_mb": min(requested.memory_mb, ceilings.memory_mb),
            "cpus": min(requested.cpus, ceilings.cpus),
            "pids": min(requested.pids, ceilings.pids),
            "network": network,
        }
    )
