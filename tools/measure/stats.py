"""Latency percentiles and rates, computed the same way for every system, and a failure said in one line."""

from __future__ import annotations

import math
import re
import statistics
from typing import Sequence

EXCEPTION_LINE = re.compile(r"\b\w+(Error|Exception)\b: ")  # `ConnectionRefusedError: [Errno 111] ...`


def error_headline(error: str | None) -> str:
    """Why a system failed, in one line: the error's first line, and when that line only introduces a log
    (`Triton exited during start-up:`), the log's last exception line after it, which says what went wrong."""
    lines = [line.strip() for line in (error or "no answer").splitlines() if line.strip()]
    if not lines:
        return "no answer"
    head = lines[0]
    if head.endswith(":") and len(lines) > 1:
        cause = next((line for line in reversed(lines[1:]) if EXCEPTION_LINE.search(line)), lines[-1])
        head = f"{head} {cause}"
    return head


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


def value_range(values: Sequence[float | None]) -> list[float] | None:
    """[min, max] of the values present; None when there are none."""
    present = [v for v in values if v is not None]
    return [min(present), max(present)] if present else None


def ranges_overlap(a: Sequence[float] | None, b: Sequence[float] | None) -> bool | None:
    """Whether two [min, max] ranges share a value (then neither system is told apart from the other by
    these rounds); None when either is missing."""
    if not a or not b:
        return None
    return a[0] <= b[1] and b[0] <= a[1]


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 2) if present else None


def cpu_ms_per_image(system: dict) -> dict[str, float]:
    """Process kind -> ms of CPU per answered image during the load (mean CPU % over throughput), largest first.
    The load generator's share is the clients' cost, the same work for every system."""
    rate = system.get("throughput_ips")
    by_process = system.get("mean_cpu_pct_by_process") or {}
    if not rate:
        return {}
    costs = {kind: round(10 * pct / rate, 2) for kind, pct in by_process.items() if pct > 0}  # pct/100 s per s, x1000 ms
    return dict(sorted(costs.items(), key=lambda item: -item[1]))


ROUND_FIELDS = ("throughput_ips", "requests", "errors", "wall_s", "loadavg")


def round_brief(measured: dict) -> dict:
    """What the report keeps of each round: its rate, its latencies, its load and its error."""
    brief = {key: measured.get(key) for key in ROUND_FIELDS}
    brief["latency_ms"] = measured.get("latency_ms")
    brief["variant"] = measured.get("variant")
    if "error" in measured:
        brief["error"] = measured["error"]
    return brief


def combine_rounds(rounds: Sequence[dict]) -> dict:
    """One system's rounds as one result: throughput and each latency percentile are the medians over the rounds
    that answered, `spread` their [min, max], `rounds` each round's own numbers. The rest (details, profile,
    variants) comes from the median-throughput round, so it describes a typical round."""
    working = [r for r in rounds if r.get("throughput_ips")]
    if not working:
        return {**rounds[0], "rounds": [round_brief(r) for r in rounds]}
    by_rate = sorted(working, key=lambda r: r["throughput_ips"])
    typical = by_rate[(len(by_rate) - 1) // 2]
    latencies = [r.get("latency_ms") or {} for r in working]
    keys = sorted({key for latency in latencies for key in latency})
    combined = {key: value for key, value in typical.items() if key != "error"}
    combined.update(
        throughput_ips=_median([r["throughput_ips"] for r in working]),
        latency_ms={key: _median([latency.get(key) for latency in latencies]) for key in keys},
        spread={"throughput_ips": value_range([r["throughput_ips"] for r in working]),
                **{key: value_range([latency.get(key) for latency in latencies]) for key in ("p50", "p99")}},
        rounds=[round_brief(r) for r in rounds],
        requests=sum(r.get("requests") or 0 for r in rounds),
        errors=sum(r.get("errors") or 0 for r in rounds),
    )
    if "variants" in rounds[0]:
        combined["variants"] = rounds[0]["variants"]
    failed = [r["error"] for r in rounds if "error" in r]
    if failed:
        combined["round_errors"] = failed
    return combined
