"""Latency percentiles and rates, computed the same way for every system."""

from __future__ import annotations

import math
from typing import Sequence


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (numpy's default method); None for no values."""
    if not values:
        return None
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be within 0..100, got {q}")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def latency_summary(seconds: Sequence[float]) -> dict[str, float | None]:
    """p50/p95/p99/mean/max in milliseconds."""
    ms = [s * 1e3 for s in seconds]
    summary = {f"p{q}": percentile(ms, q) for q in (50, 95, 99)}
    summary["mean"] = sum(ms) / len(ms) if ms else None
    summary["max"] = max(ms) if ms else None
    return {k: _round(v) for k, v in summary.items()}


def rate(count: int, seconds: float) -> float | None:
    return count / seconds if count and seconds > 0 else None


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator, or None when either is missing: a ratio is never invented."""
    if numerator is None or not denominator:
        return None
    return round(numerator / denominator, 3)


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)
