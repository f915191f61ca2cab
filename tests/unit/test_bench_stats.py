"""Percentiles, latency summaries and ratios: the arithmetic every reported number goes through."""

import pytest

from tsvk_tools.measure.stats import latency_summary, percentile, rate, ratio


def test_percentile_interpolates_like_numpy():
    values = [1.0, 2.0, 3.0, 4.0]
    assert percentile(values, 50) == pytest.approx(2.5)
    assert percentile(values, 99) == pytest.approx(3.97)
    assert percentile(values, 0) == 1.0 and percentile(values, 100) == 4.0


def test_percentile_of_nothing_is_none_and_bad_q_is_refused():
    assert percentile([], 50) is None
    with pytest.raises(ValueError, match="0..100"):
        percentile([1.0], 101)


def test_latency_summary_is_in_milliseconds():
    summary = latency_summary([0.1, 0.2, 0.3])
    assert summary["p50"] == 200.0
    assert summary["max"] == 300.0
    assert summary["mean"] == 200.0


def test_ratio_is_none_when_either_side_is_missing():
    assert ratio(10.0, 4.0) == 2.5
    assert ratio(None, 4.0) is None
    assert ratio(10.0, None) is None
    assert ratio(10.0, 0.0) is None


def test_rate_needs_a_positive_span():
    assert rate(10, 2.0) == 5.0
    assert rate(10, 0.0) is None
    assert rate(0, 2.0) is None


def test_a_failure_that_introduces_a_log_is_said_with_the_logs_last_exception():
    from tsvk_tools.measure.stats import error_headline

    started = ("UsageError: Triton exited during start-up:\n  File \"model.py\", line 425, in initialize\n"
               "ConnectionRefusedError: [Errno 111] Connection refused\n\nAt:\n  /tmp/f/1/model.py(454): initialize\n;")
    assert error_headline(started) == ("UsageError: Triton exited during start-up: "
                                       "ConnectionRefusedError: [Errno 111] Connection refused")
    assert error_headline("RuntimeError: no warm-up request was answered\nmore") == "RuntimeError: no warm-up request was answered"
    assert error_headline("X exited during start-up:\nlast words") == "X exited during start-up: last words"
    assert error_headline(None) == error_headline("\n") == "no answer"
