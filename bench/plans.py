"""How long and how hard each part runs: the full run (the issue's numbers) and the smoke run."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Plan:
    """Sizes of one run."""

    mode: str
    decision_n: int
    """Rounds of Execute(Read) + health Check + OPA query, one call at a time."""
    decision_warmup: int
    readonly_clients: int
    readonly_s: float
    warmup_s: float
    """Load before each measured window (connections, caches, pool refill)."""
    tree_files: int
    """Files of the generated tree the batch part greps."""
    batch_rounds: int
    pool_size: int
    warm_n: int
    cold_n: int
    """Cold calls; as many `docker run` calls are interleaved with them."""
    settle_s: float
    """Pause between spaced sandbox calls (the previous container is removed meanwhile)."""
    churn_clients: int
    churn_s: float
    churn_warmup_s: float
    """Shorter than one sandboxed call in the smoke run, or its window may see no call end."""
    flood_bytes: int
    egress_connects: int
    """Connections set up directly and through the egress proxy, each."""
    egress_bytes: int
    """Size of the download measured directly, tunnelled and intercepted."""
    mcp_calls: int
    """Calls of the upstream MCP tool, directly and through tooljail, each."""
    opa_timeout_s: float
    """The daemon's decision timeout (the smoke run must not turn a slow machine into denies)."""
    call_timeout_s: float

    def as_dict(self) -> dict[str, Any]:
        """The plan as JSON-ready data."""
        return asdict(self)


FULL = Plan(
    mode="full",
    decision_n=1000,
    decision_warmup=100,
    readonly_clients=32,
    readonly_s=30.0,
    warmup_s=3.0,
    tree_files=20_000,
    batch_rounds=4,
    pool_size=2,
    warm_n=25,
    cold_n=15,
    settle_s=0.3,
    churn_clients=4,
    churn_s=60.0,
    churn_warmup_s=3.0,
    flood_bytes=1 << 30,
    egress_connects=500,
    egress_bytes=100 << 20,
    mcp_calls=300,
    opa_timeout_s=0.5,
    call_timeout_s=120.0,
)

SMOKE = Plan(
    mode="smoke",
    decision_n=30,
    decision_warmup=5,
    readonly_clients=4,
    readonly_s=1.0,
    warmup_s=0.2,
    tree_files=1_000,
    batch_rounds=1,
    pool_size=1,
    warm_n=2,
    cold_n=1,
    settle_s=0.1,
    churn_clients=2,
    churn_s=2.0,
    churn_warmup_s=0.0,
    flood_bytes=16 << 20,
    egress_connects=10,
    egress_bytes=1 << 20,
    mcp_calls=10,
    opa_timeout_s=5.0,
    call_timeout_s=120.0,
)
