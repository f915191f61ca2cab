"""The soak's drift figures: medians of the first and last windows after warm-up, so one sample cannot
pass or fail the run, while a steady climb still fails it."""

from __future__ import annotations

from types import SimpleNamespace

from tsvk_tools.lab.robustness.soak_report import summarize

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


def test_the_attribution_compares_the_frontend_and_the_cpu_early_and_late():
    per_minute = minutes([1000.0] * 40)
    for m in per_minute:
        late = m["minute"] >= 30
        m.update(frontend_p99_ms=330 if late else 300, worker_cpu_ms_per_answer=40.0,
                 cpu_pct={"service": 80.0, "client": 5.0, "outside": 12.0 if late else 2.0, "steal": 1.0})
    figures = summarize(per_minute, 26.0, 18.2, ARGS)
    assert figures["frontend_p99_drift_pct"] == 10.0
    assert figures["worker_cpu_ms_per_answer_early"] == figures["worker_cpu_ms_per_answer_late"] == 40.0
    assert (figures["cpu_pct_outside_and_steal_early"], figures["cpu_pct_outside_and_steal_late"]) == (3.0, 13.0)


def test_minutes_without_the_attribution_still_summarize():
    figures = summarize(minutes([1000.0] * 40), 26.0, 18.2, ARGS)
    assert figures["frontend_p99_drift_pct"] is None and figures["cpu_pct_client_early"] is None
