"""Latency summaries and throughput series from raw samples (no I/O, no dependencies)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

#: Points kept of each latency distribution (percentiles 0..100), enough to redraw its CDF.
CDF_POINTS = 101


def percentile(samples: Sequence[float], pct: float) -> float:
    """The nearest-rank percentile: the smallest sample with at least pct% of samples at or
    below it. Nearest rank never invents a value that was not measured."""
    if not samples:
        raise ValueError("percentile of no samples")
    if not 0 <= pct <= 100:
        raise ValueError(f"percentile must be within 0..100, got {pct}")
    ordered = sorted(samples)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def summarize(samples_s: Sequence[float]) -> dict[str, Any]:
    """Count, mean and percentiles of latencies given in seconds, reported in milliseconds, with
    the distribution kept as CDF_POINTS percentiles so plots can be redrawn from the JSON."""
    if not samples_s:
        return {"n": 0}
    ordered = sorted(s * 1000 for s in samples_s)
    return {
        "n": len(ordered),
        "mean_ms": sum(ordered) / len(ordered),
        "p50_ms": percentile(ordered, 50),
        "p95_ms": percentile(ordered, 95),
        "p99_ms": percentile(ordered, 99),
        "max_ms": ordered[-1],
        "cdf_ms": [percentile(ordered, p) for p in range(CDF_POINTS)],
    }


def per_second(
    completions_s: Iterable[float], duration_s: float, width_s: float = 1.0
) -> list[int]:
    """Calls completed in each bucket of `width_s` from the start of the measured window.
    Completions after `duration_s` (calls still in flight at the deadline) go to the last bucket."""
    buckets = [0] * max(1, math.ceil(duration_s / width_s))
    for t in completions_s:
        if t < 0:
            continue
        buckets[min(len(buckets) - 1, int(t // width_s))] += 1
    return buckets


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator, or None when either is missing or the denominator is not > 0."""
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return numerator / denominator
