"""The soak's figures: drift of memory, p99 and open files after warm-up, errors on good requests, a plot.

Per-process names carry pids ("worker 1234"), so a restarted worker shows as a new series; the
drift figures use the totals over every process, which a restart cannot hide."""

from __future__ import annotations

import statistics
from pathlib import Path

from . import checks
from .checks import judged

RSS_DRIFT_GOAL_PCT = 5.0
P99_DRIFT_GOAL_PCT = 10.0
# Drifts compare the medians of the first and last this-many minutes after warm-up: one minute's p99, or
# one RSS sample (taken anywhere in a batch's allocate-and-free cycle), moves by more than a drift goal.
WINDOW_MINUTES = 10


def summarize(per_minute: list[dict], capacity: float, rate: float, args) -> dict:
    steady = [m for m in per_minute if m["minute"] >= args.warmup_minutes and m["good"]]
    rss = _totals(steady, "rss_mb")
    fds = _totals(steady, "fds")
    window = drift_window(len(steady))
    early, late = _early_late([m["p99_ms"] for m in steady], window)
    rss_early, rss_late = _early_late(rss, window)
    rss_drift = _pct(rss_early, rss_late)
    p99_drift = _pct(early, late)
    good_errors = sum(m["good_errors"] for m in per_minute)
    figures = {
        "minutes": args.minutes, "capacity_req_s": round(capacity, 2), "rate_req_s": round(rate, 2), "load": args.load,
        "malformed_share": args.malformed, "warmup_minutes": args.warmup_minutes,
        "good_requests": sum(m["good"] for m in per_minute), "good_errors": good_errors,
        "malformed_requests": sum(m["malformed"] for m in per_minute), "malformed_5xx": sum(m["malformed_5xx"] for m in per_minute),
        "skipped_sends": sum(m["skipped"] for m in per_minute),
        "rss_mb_after_warmup": rss[0] if rss else None, "rss_mb_at_end": rss[-1] if rss else None,
        "rss_mb_peak": max(rss) if rss else None, "rss_mb_early": rss_early, "rss_mb_late": rss_late, "rss_drift_pct": rss_drift,
        "p99_ms_early": early, "p99_ms_late": late, "p99_drift_pct": p99_drift,
        **_attribution(steady, window),
        "fds_after_warmup": fds[0] if fds else None, "fds_at_end": fds[-1] if fds else None,
        "fd_growth": (fds[-1] - fds[0]) if fds else None, "per_minute": per_minute,
    }
    figures.update(judged({
        f"RSS drift under {RSS_DRIFT_GOAL_PCT:g}%": checks.drift_under(rss_drift, RSS_DRIFT_GOAL_PCT, "RSS"),
        "no errors on good requests": checks.none_failed(figures["good_requests"], good_errors, "good requests"),
        f"p99 drift under {P99_DRIFT_GOAL_PCT:g}%": checks.drift_under(p99_drift, P99_DRIFT_GOAL_PCT, "p99"),
        "no open-file growth": checks.no_growth(figures["fd_growth"], "open files"),
        "no 5xx on malformed requests": checks.none_failed(figures["malformed_requests"], figures["malformed_5xx"],
                                                           "malformed requests"),
    }))
    return figures


def drift_window(steady_minutes: int) -> int:
    """Minutes in each of the early and late windows a drift compares; 0 with fewer than two steady minutes
    after warm-up, where both windows would be the same minute and a drift of 0 would prove nothing."""
    return min(WINDOW_MINUTES, steady_minutes // 2)


def _early_late(values: list[float | None], window: int) -> tuple[float | None, float | None]:
    """The medians of the first and the last `window` values; (None, None) for an empty window."""
    if not window:
        return None, None
    return _median(values[:window]), _median(values[len(values) - window:])


def _totals(steady: list[dict], key: str) -> list[float]:
    """Each minute's total over every process; none at all when any minute found no process (a sum of
    nothing is not a measurement of 0)."""
    if not steady or not all(m[key] for m in steady):
        return []
    return [sum(m[key].values()) for m in steady]


def _attribution(steady: list[dict], window: int) -> dict:
    """Early and late medians of what tells a slower service from a busier machine or client: the
    frontend's own p99, the worker's CPU per answer, and the CPU the service did not get."""
    def early_late(name: str, value) -> dict:
        early, late = _early_late([value(m) for m in steady], window)
        return {f"{name}_early": early, f"{name}_late": late}

    def cpu(m: dict, *parts: str) -> float | None:
        shares = m.get("cpu_pct") or {}
        return sum(shares[p] for p in parts) if all(p in shares for p in parts) else None

    figures = {
        **early_late("frontend_p99_ms", lambda m: m.get("frontend_p99_ms")),
        **early_late("worker_cpu_ms_per_answer", lambda m: m.get("worker_cpu_ms_per_answer")),
        **early_late("cpu_pct_client", lambda m: cpu(m, "client")),
        **early_late("cpu_pct_outside_and_steal", lambda m: cpu(m, "outside", "steal")),
    }
    figures["frontend_p99_drift_pct"] = _pct(figures["frontend_p99_ms_early"], figures["frontend_p99_ms_late"])
    return figures


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 1) if present else None


def _pct(before: float | None, after: float | None) -> float | None:
    if not before or after is None:
        return None
    return round((after - before) / before * 100, 2)


def write_plot(per_minute: list[dict], path: Path) -> Path | None:
    """Memory per process, good p99 and open files per minute; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    minutes = [m["minute"] + 1 for m in per_minute]
    fig, (rss_ax, p99_ax, cpu_ax, fd_ax) = plt.subplots(4, 1, figsize=(9, 11), sharex=True)
    for name in sorted({n for m in per_minute for n in m["rss_mb"]}):
        rss_ax.plot(minutes, [m["rss_mb"].get(name) for m in per_minute], label=name)
    rss_ax.set_ylabel("RSS (MiB)")
    rss_ax.legend(fontsize=7)
    p99_ax.plot(minutes, [m["p99_ms"] for m in per_minute], color="tab:red", label="client")
    p99_ax.plot(minutes, [m.get("frontend_p99_ms") for m in per_minute], color="tab:orange", label="frontend (access log)")
    p99_ax.set_ylabel("good p99 (ms)")
    p99_ax.legend(fontsize=7)
    for part in ("service", "client", "outside", "steal"):
        cpu_ax.plot(minutes, [(m.get("cpu_pct") or {}).get(part) for m in per_minute], label=part)
    cpu_ax.set_ylabel("CPU (% of machine)")
    cpu_ax.legend(fontsize=7)
    fd_ax.plot(minutes, [sum(m["fds"].values()) for m in per_minute], color="tab:green")
    fd_ax.set_ylabel("open files (all)")
    fd_ax.set_xlabel("minute")
    fig.suptitle("tsvk soak")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
