"""Whether a candidate may replace the rule's plan: judged on windows measured alternately with that plan.

One load window can be lucky or unlucky by more than the differences a tune ranks: on a shared
2-vCPU machine two 30 s windows of the same config were measured 11% apart. So the config `tsvk config`
plans by rule (one single-threaded worker per vCPU) is only replaced by a candidate that wins in every
window: the rule's plan and the candidate are served side by side and loaded in turn, window after
window with the same clients, and the candidate departs from the rule only when its worst window beats
the rule's best. Windows are ranked as the search ranks candidates: one that meets the goals (p99, the
throughput floor, no failed request) beats any that misses them; among those that meet them, more
images/s wins; among those that miss, the smaller miss. So a candidate that meets the goals in every
window where the rule's plan meets them in none wins even when slower; otherwise its slowest window must
be faster than the rule's fastest (the ranges do not overlap), and when both meet the goals its p99 must
not be higher in every window. Anything else is within the noise, and the rule's plan stays.

The test is deliberately plain and its confidence is stated: with three windows a side, a candidate no
better than the rule's plan wins by chance 1 time in 20 (of the 20 ways to rank 6 exchangeable windows,
1 puts the candidate's 3 on top), with no assumption about the shape of the noise, which a machine
shared with other work would break.

Adding a window can only lower the candidate's worst or raise the rule's best, never the other way,
so a comparison stops as soon as the candidate's worst no longer beats the rule's best (`cannot_win`):
the windows go where they still decide something.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Sequence


@dataclass(frozen=True)
class Goal:
    """What the user asked of a config; a window is ranked against it first (the search and the verdict alike)."""

    p99_ms: float | None = None  # every model's p99 at or under this
    min_img_s: float | None = None  # every model at or above this (a floor, reported when unreachable)
    memory_mb: float | None = None  # the cap: what the whole TorchServe may use


@dataclass(frozen=True)
class Window:
    """One load window of one config: images/s summed over its models, the worst model's p99."""

    img_s: float
    p99_ms: float | None = None
    requests: int = 0
    errors: int = 0
    per_model_img_s: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0


@dataclass(frozen=True)
class Spread:
    median: float
    low: float
    high: float

    def describe(self, digits: int = 1, unit: str = "img/s") -> str:
        return f"{self.median:,.{digits}f} {unit} ({self.low:,.{digits}f}-{self.high:,.{digits}f})"


@dataclass(frozen=True)
class Verdict:
    departs: bool  # True: the candidate replaces the rule's plan
    reason: str  # why, with the figures


def spread(values: Sequence[float]) -> Spread | None:
    present = [v for v in values if v is not None]
    return Spread(statistics.median(present), min(present), max(present)) if present else None


def miss(window: Window, goal: Goal) -> float:
    """How far a window is from the goals, as the search counts a candidate's miss (0: meets them all)."""
    total = 10.0 * window.errors / max(1, window.requests)
    if goal.p99_ms is not None:
        total += max(0.0, (window.p99_ms if window.p99_ms is not None else math.inf) / goal.p99_ms - 1)
    if goal.min_img_s is not None:
        total += sum(max(0.0, 1 - rate / goal.min_img_s) for rate in window.per_model_img_s.values())
    return total


def rank(window: Window, goal: Goal) -> tuple[int, float]:
    """Higher is better: meeting the goals first, then images/s, or among misses the smaller miss."""
    missed = miss(window, goal)
    return (1, window.img_s) if missed == 0 else (0, -missed)


def verdict(rule: Sequence[Window], candidate: Sequence[Window], goal: Goal, min_windows: int) -> Verdict:
    """Whether the candidate replaces the rule's plan, given both sides' alternating windows."""
    lost = cannot_win(rule, candidate, goal)
    if lost:
        return Verdict(False, lost)
    if min(len(rule), len(candidate)) < min_windows:
        return Verdict(False, f"only {len(candidate)} window(s) of the candidate and {len(rule)} of the rule's plan were "
                              f"measured; at least {min_windows} of each decide")
    fast, slow = _img_s(candidate), _img_s(rule)
    if not any(rank(w, goal)[0] for w in rule):
        met = "met the goals" if all(rank(w, goal)[0] for w in candidate) else "missed the goals by less"
        return Verdict(True, f"it {met} in all {len(candidate)} of its windows, the rule's plan missed them in all {len(rule)} "
                             f"of its ({fast.describe()} against {slow.describe()})")
    tail, rule_tail = spread([w.p99_ms for w in candidate]), spread([w.p99_ms for w in rule])
    if tail and rule_tail and tail.low > rule_tail.high:
        return Verdict(False, f"faster in every window ({fast.describe()} against {slow.describe()}), but its p99 was higher in "
                              f"every window ({tail.describe(0, 'ms')} against {rule_tail.describe(0, 'ms')})")
    return Verdict(True, f"its slowest window beat the rule's fastest: {fast.describe()} against {slow.describe()} "
                         f"({fast.median / slow.median:.2f}x the median), p99 {_p99_text(tail, rule_tail)}")


def cannot_win(rule: Sequence[Window], candidate: Sequence[Window], goal: Goal) -> str:
    """Why more windows cannot make the candidate win, or "" while they still can."""
    if not rule or not candidate or min(rank(w, goal) for w in candidate) > max(rank(w, goal) for w in rule):
        return ""
    missed = [str(i + 1) for i, w in enumerate(candidate) if not rank(w, goal)[0]]
    if missed and any(rank(w, goal)[0] for w in rule):
        return f"it missed the goals in window(s) {', '.join(missed)} of {len(candidate)}, where the rule's plan met them"
    fast, slow = _img_s(candidate), _img_s(rule)
    if fast.high < slow.low:
        return f"it was slower in every window: {fast.describe()} against {slow.describe()} for the rule's plan"
    return f"the windows overlap, within the noise: {fast.describe()} for the candidate against {slow.describe()} for the rule's plan"


def _img_s(windows: Sequence[Window]) -> Spread:
    return spread([w.img_s for w in windows])


def _p99_text(tail: Spread | None, rule_tail: Spread | None) -> str:
    if tail is None or rule_tail is None:
        return "not measured"
    return f"{tail.describe(0, 'ms')} against {rule_tail.describe(0, 'ms')}"
