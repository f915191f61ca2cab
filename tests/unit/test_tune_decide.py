"""The decision that lets a tuned config depart from the rule's plan: on alternating windows, only a clear win counts."""

from __future__ import annotations

import pytest

from tsvk_tools.tune.decide import Window, cannot_win, spread, verdict
from tsvk_tools.tune.search import Goal

PAIRS = 3


def windows(*img_s: float, p99_ms: float = 1_000.0, errors: int = 0) -> list[Window]:
    return [Window(rate, p99_ms, 100, errors, {"net": rate}) for rate in img_s]


def test_overlapping_windows_keep_the_rule():
    """The run this guards against: the candidate's median is 9% higher, but one of its windows is below the rule's best."""
    rule, candidate = windows(32.8, 33.5, 31.9), windows(35.9, 32.6, 36.7)
    decided = verdict(rule, candidate, Goal(), PAIRS)
    assert not decided.departs
    assert "overlap" in decided.reason and "35.9 img/s (32.6-36.7)" in decided.reason and "32.8 img/s (31.9-33.5)" in decided.reason


def test_windows_apart_pick_the_winner():
    rule, candidate = windows(30.1, 31.0, 30.6), windows(33.0, 32.2, 34.1)
    decided = verdict(rule, candidate, Goal(), PAIRS)
    assert decided.departs
    assert "slowest window beat the rule's fastest" in decided.reason and "1.08x the median" in decided.reason


def test_a_single_touching_window_is_enough_to_keep_the_rule():
    rule, candidate = windows(30.0, 31.0, 32.2), windows(33.0, 32.2, 34.1)  # 32.2 on both sides: not apart
    assert not verdict(rule, candidate, Goal(), PAIRS).departs


def test_faster_but_a_worse_p99_in_every_window_keeps_the_rule():
    rule = windows(30.1, 31.0, 30.6, p99_ms=900.0)
    candidate = windows(33.0, 32.2, 34.1, p99_ms=1_400.0)
    decided = verdict(rule, candidate, Goal(), PAIRS)
    assert not decided.departs and "p99 was higher in every window" in decided.reason


def test_too_few_windows_keep_the_rule():
    rule, candidate = windows(30.1), windows(40.0)
    decided = verdict(rule, candidate, Goal(), PAIRS)
    assert not decided.departs and "at least 3 of each decide" in decided.reason


def test_meeting_a_goal_the_rule_misses_in_every_window_wins_even_when_slower():
    goal = Goal(p99_ms=1_000.0)
    rule = windows(31.0, 30.2, 30.8, p99_ms=1_500.0)
    candidate = windows(28.0, 29.5, 30.9, p99_ms=800.0)
    decided = verdict(rule, candidate, goal, PAIRS)
    assert decided.departs and "met the goals in all 3" in decided.reason


def test_a_candidate_missing_a_goal_in_one_window_keeps_the_rule():
    goal = Goal(p99_ms=1_000.0)
    rule = windows(30.1, 31.0, 30.6, p99_ms=900.0)
    candidate = windows(33.0, 32.2, p99_ms=800.0) + windows(34.1, p99_ms=1_100.0)
    decided = verdict(rule, candidate, goal, PAIRS)
    assert not decided.departs and "missed the goals in window(s) 3 of 3, where the rule's plan met them" in decided.reason


def test_failed_requests_count_as_a_missed_goal():
    rule = windows(30.1, 31.0, 30.6)
    candidate = windows(40.0, 41.0) + windows(42.0, errors=3)
    assert not verdict(rule, candidate, Goal(), PAIRS).departs


@pytest.mark.parametrize("rule, candidate, settled", [
    ([], [], False),
    (windows(30.0), [], False),
    (windows(30.0), windows(33.0), False),  # still apart
    (windows(30.0), windows(29.0), True),  # below the rule's window: never apart again
    (windows(30.0, 33.5), windows(33.0), True),  # the rule's second window passed the candidate's first
])
def test_a_comparison_is_settled_as_soon_as_the_candidate_cannot_win(rule, candidate, settled):
    assert bool(cannot_win(rule, candidate, Goal())) is settled


def test_when_both_miss_the_goals_the_smaller_miss_wins():
    goal = Goal(min_img_s=50.0)  # out of reach: the faster side misses it by less
    rule, candidate = windows(30.1, 31.0, 30.6), windows(33.0, 32.2, 34.1)
    decided = verdict(rule, candidate, goal, PAIRS)
    assert decided.departs and "missed the goals by less" in decided.reason
    assert not verdict(rule, windows(33.0, 30.9, 34.1), goal, PAIRS).departs


def test_the_goal_path_keeps_a_comparison_open_while_the_rule_misses_every_window():
    goal = Goal(p99_ms=1_000.0)
    rule = windows(31.0, p99_ms=1_500.0)
    candidate = windows(28.0, p99_ms=800.0)  # slower, but only it meets the goal so far
    assert cannot_win(rule, candidate, goal) == ""
    assert cannot_win(rule + windows(31.0, p99_ms=900.0), candidate, goal)


def test_a_slower_candidate_is_said_to_be_slower_not_within_the_noise():
    reason = cannot_win(windows(30.0, 31.0), windows(25.0), Goal())
    assert reason.startswith("it was slower in every window: 25.0 img/s")


def test_spread_is_median_and_range():
    found = spread([3.0, 1.0, 2.0, None])
    assert (found.median, found.low, found.high) == (2.0, 1.0, 3.0)
    assert spread([]) is None
