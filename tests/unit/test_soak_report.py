"""The soak's drift figures: medians of the first and last windows after warm-up, so one sample cannot
pass or fail the run, while a steady climb still fails it."""

from __future__ import annotations

from types import SimpleNamespace

from tools.robustness.soak_report import summarize

ARGS = SimpleNamespace(minutes=40, load=0.7, malformed=0.05, warmup_minutes=10)


def minutes(worker_rss: list[float], p99: float = 500.0) -> list[dict]:
    return [{"minute": i, "good": 100, "good_errors": 0, "malformed": 5, "malformed_5xx": 0, "p50_ms": 200.0,
             "p99_ms": p99, "skipped": 0, "rss_mb": {"frontend": 280.0, "worker 1": rss}, "fds": {"frontend": 60}}
            for i, rss in enumerate(worker_rss)]


def test_one_high_sample_does_not_fail_the_run():
    rss = [1000.0] * 40
    rss[-1] = 1150.0  # caught mid-batch
    figures = summarize(minutes(rss), 26.0, 18.2, ARGS)
    assert figures["rss_drift_pct"] == 0.0 and figures["rss_mb_peak"] == 1430.0
    assert all(figures["checks"].values())


def test_a_steady_climb_fails_the_run():
    figures = summarize(minutes([1000.0 + 4 * i for i in range(40)]), 26.0, 18.2, ARGS)
    assert figures["rss_drift_pct"] > 5
    assert not figures["checks"]["RSS drift under 5%"]
