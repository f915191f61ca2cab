"""How `tsvk tune` spends its budget: a coarse pass, then hill-climbing from the best point.

Why this and not a library sampler (optuna's TPE, say): every measurement here costs tens of seconds
to minutes (a TorchServe start plus a load window), so a budget buys 5 to 20 of them. The space is
small and discrete, and its structure is known: the worker/thread split matters most on a CPU, batch
next, the delay least. A model-based sampler needs more trials than that to beat a search that uses
the structure, and its choices would change from run to run. So, like Triton Model Analyzer's quick
search: measure the worker/thread splits first (the 1 x N versus N x 1 question), then climb one
step in one dimension at a time from the best, moving as soon as a neighbour is clearly better
(by more than the noise, TUNE_NOISE), until no neighbour is or the budget is spent.

Decision: one window can be lucky or unlucky by more than the differences the climb ranks (a slow
start, another process), so the search's best is only a contender. The plan `tsvk config` writes
without a tune (the N x 1 split at the archives' batch and delay) stays unless a contender wins against
it in windows measured alternately, both served side by side with the same clients (decide.py: the
contender's slowest window must beat the rule's fastest, or it must meet the goals where the rule
misses them). The contenders are the candidates that measured better than the rule's plan, best
first (TUNE_CONFIRM of them at most); the first that wins is chosen, and when none does (or no time is
left to compare) the rule's plan is written, with the windows that say why.

Budget: the next candidate is started only while the time left covers the longest candidate so far
plus the decision's share (two server starts and TUNE_DECISION_PAIRS pairs of windows); each
measurement also gets the search's deadline and is cut there, so the whole search ends within the
budget. Candidates that clearly lose stop after their first, short window (early stop), a comparison
stops as soon as its contender can no longer win, and a candidate whose estimated memory exceeds the
cap is never started (memory.py).

Choice: the highest total images/s among candidates that meet every goal (p99, memory, the images/s
floor per model). When none does, the candidate that misses the goals by least, and the report says
so. The search is pure: measuring is a function passed in, so tests run it on made-up measurements.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field, replace
from typing import Callable

from .. import defaults
from .decide import Goal, Verdict, Window, cannot_win, verdict
from .memory import MemoryModel
from .space import Candidate, Space


@dataclass
class Measurement:
    """What one candidate did under load. img_s is summed over the models; p50/p99 are the worst model's."""

    img_s: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    peak_rss_mb: float | None = None
    mean_cpu_pct: float | None = None
    requests: int = 0
    errors: int = 0
    per_model: dict[str, dict] = field(default_factory=dict)  # name -> img_s, p50_ms, p99_ms, requests, errors, concurrency
    frontend_rss_mb: float | None = None
    worker_rss_mb: dict[str, float] = field(default_factory=dict)  # name -> the largest peak RSS of one of its workers
    stopped_early: str = ""  # why the candidate was stopped after its first window
    error: str = ""  # why it could not be measured (did not start, cut at the deadline, ...)
    seconds: float = 0.0  # start to stop, server start included
    load_s: float = 0.0  # of which under measured load
    windows: list[Window] = field(default_factory=list)  # the load in consecutive windows, each on its own


@dataclass
class Comparison:
    """The rule's plan and a contender served side by side, loaded in turn with the same clients."""

    rule: list[Window] = field(default_factory=list)
    contender: list[Window] = field(default_factory=list)
    order: list[str] = field(default_factory=list)  # "rule" / "contender", in the order the windows ran
    clients: dict[str, int] = field(default_factory=dict)  # per model, the same for both
    window_s: float = 0.0
    stopped: str = ""  # why it ended before its last pair (the contender could no longer win)
    error: str = ""  # why it could not be run
    seconds: float = 0.0


@dataclass
class Decision:
    """One contender judged against the rule's plan."""

    contender: int  # trial numbers
    rule: int
    comparison: Comparison | None
    verdict: Verdict


UNMEASURED_RULE = "not measured: the budget ran out before it"
CUT_AT_DEADLINE = "cut at the deadline"  # a measurement or comparison the budget ended

# A measurement: (candidate, early-stop rule, absolute deadline) -> Measurement. The early-stop rule
# takes the first window's measurement and returns why to stop, or "".
Measure = Callable[[Candidate, Callable[[Measurement], str], float], Measurement]
# A comparison: (rule's plan, contender, settled, absolute deadline) -> Comparison. `settled` takes both
# sides' windows so far and returns why the contender can no longer win, or "".
Compare = Callable[[Candidate, Candidate, Callable[[list[Window], list[Window]], str], float], Comparison]


@dataclass
class Trial:
    number: int
    phase: str  # coarse, climb
    candidate: Candidate
    measurement: Measurement | None = None
    skipped: str = ""  # why it was not run
    estimated_mb: float | None = None

    @property
    def measured(self) -> bool:
        m = self.measurement
        return m is not None and not m.error and not m.stopped_early and m.img_s is not None


@dataclass
class SearchResult:
    trials: list[Trial]
    chosen: Trial | None
    goal_met: bool
    problems: list[str]  # what the chosen one misses (empty when goal_met)
    stopped_because: str
    seconds: float
    memory_cap_mb: float | None
    rule_plan: Trial | None = None  # the plan `tsvk config` writes, as measured
    decisions: list[Decision] = field(default_factory=list)
    chosen_because: str = ""


def problems_of(trial: Trial, goal: Goal) -> list[str]:
    """The goals a fully measured trial misses, each said with its numbers."""
    m = trial.measurement
    found = []
    if m.errors:
        found.append(f"{m.errors} of {m.requests} requests failed")
    if goal.p99_ms is not None and m.p99_ms is not None and m.p99_ms > goal.p99_ms:
        found.append(f"p99 {m.p99_ms:,.0f} ms > {goal.p99_ms:,.0f} ms")
    if goal.memory_mb is not None and m.peak_rss_mb is not None and m.peak_rss_mb > goal.memory_mb:
        found.append(f"peak RSS {m.peak_rss_mb:,.0f} MiB > {goal.memory_mb:,.0f} MiB")
    if goal.min_img_s is not None:
        for name, model in m.per_model.items():
            if (model.get("img_s") or 0) < goal.min_img_s:
                found.append(f"{name} {model.get('img_s') or 0:.1f} img/s < {goal.min_img_s:g} img/s")
    return found


def violation(trial: Trial, goal: Goal) -> float:
    """How far a measured trial is from the goals, as a sum of relative excesses (0: meets them all)."""
    m = trial.measurement
    total = 10.0 * m.errors / max(1, m.requests)
    if goal.p99_ms is not None and m.p99_ms is not None:
        total += max(0.0, m.p99_ms / goal.p99_ms - 1)
    if goal.memory_mb is not None and m.peak_rss_mb is not None:
        total += 10.0 * max(0.0, m.peak_rss_mb / goal.memory_mb - 1)  # over the cap is the worst miss
    if goal.min_img_s is not None:
        total += sum(max(0.0, 1 - (model.get("img_s") or 0) / goal.min_img_s) for model in m.per_model.values())
    return total


def score(trial: Trial, goal: Goal) -> tuple[int, float]:
    """Higher is better: any candidate meeting the goals beats any that does not; then images/s, or
    among those that miss, the smaller miss."""
    miss = violation(trial, goal)
    return (1, trial.measurement.img_s) if miss == 0 else (0, -miss)


def clearly_better(new: Trial, old: Trial, goal: Goal, noise: float = defaults.TUNE_NOISE) -> bool:
    if not new.measured:
        return False
    (new_ok, new_value), (old_ok, old_value) = score(new, goal), score(old, goal)
    if new_ok != old_ok:
        return new_ok > old_ok
    if new_ok:
        return new_value > old_value * (1 + noise)
    return new_value > old_value + noise  # misses are negative: a smaller miss by more than the noise


@dataclass
class Search:
    space: Space
    measure: Measure
    goal: Goal
    budget_s: float
    clock: Callable[[], float] = time.monotonic
    progress: Callable[[str], None] = print
    early_stop_share: float = defaults.TUNE_EARLY_STOP_SHARE
    reserve_s: float = 0.0  # kept back for writing the results
    memory: MemoryModel = field(default_factory=MemoryModel)
    compare: Compare | None = None  # None: no comparison can be run, and the rule's plan is kept
    decision_window_s: float = 0.0  # each window of a comparison
    decision_pairs: int = defaults.TUNE_DECISION_PAIRS

    def __post_init__(self):
        self.started = self.clock()
        self.trials: list[Trial] = []
        self.tried: set[Candidate] = set()

    @property
    def deadline(self) -> float:
        return self.started + self.budget_s - self.reserve_s

    def run(self) -> SearchResult:
        stopped = self._coarse() or self._climb()
        chosen, because, decisions = self._decide()
        problems = (["no candidate could be measured"] if chosen is None else [chosen.measurement.error] if chosen.measurement.error
                    else problems_of(chosen, self.goal))
        return SearchResult(self.trials, chosen, chosen is not None and not problems, problems, stopped,
                            round(self.clock() - self.started, 1), self.goal.memory_mb, self.rule_trial(), decisions, because)

    def _coarse(self) -> str:
        """The worker/thread splits; the rule's plan is measured whenever its own time is left, since every
        verdict needs it, while any other candidate needs time for a comparison after it too."""
        rule, stopped = self.space.coarse()[-1], ""
        for candidate in self.space.coarse():
            if not self._time_for_another(with_comparison=candidate != rule):
                stopped = "the budget ran out during the coarse pass"
                continue
            self._try(candidate, "coarse")
        return stopped

    def _climb(self) -> str:
        current = self.best()
        if current is None:
            return "no coarse candidate could be measured"
        while True:
            moved = False
            for neighbour in self.space.neighbours(current.candidate):
                if neighbour in self.tried:
                    continue
                if not self._time_for_another():
                    return "the budget ran out"
                trial = self._try(neighbour, "climb")
                if trial and clearly_better(trial, current, self.goal):
                    current, moved = trial, True
                    break
            if not moved:
                return "no neighbour of the best is better (a local optimum)"

    def rule_trial(self) -> Trial | None:
        """The rule's plan as measured (also when it was stopped early), or None when it never ran."""
        rule = self.space.coarse()[-1]
        judged = next((t for t in self._judged() if t.candidate == rule), None)
        return judged or next((t for t in self.trials if t.candidate == rule and t.measurement is not None), None)

    def contenders(self, rule: Trial) -> list[Trial]:
        """Fully measured candidates that did better than the rule's plan, best first, TUNE_CONFIRM at most."""
        judged = [t for t in self._judged() if t.candidate != rule.candidate]
        better = [t for t in judged if not rule.measured or score(t, self.goal) > score(rule, self.goal)]
        return sorted(better, key=lambda t: score(t, self.goal), reverse=True)[:defaults.TUNE_CONFIRM]

    def _decide(self) -> tuple[Trial | None, str, list[Decision]]:
        """The rule's plan, unless a contender wins against it in alternating windows (decide.py)."""
        rule = self.rule_trial()
        if rule is not None and rule.measurement.error == CUT_AT_DEADLINE or rule is None and not self._skipped_rule():
            return rule or self._unmeasured_rule(), ("the budget ran out before the rule's plan was measured, so nothing could be "
                                             "compared with it and the rule's plan is written as it is (give the tune more time)"), []
        if rule is None or rule.measurement.error:
            best = self.best()
            why = rule.measurement.error.splitlines()[0] if rule else self._skipped_rule()
            return best, f"the rule's plan could not be measured ({why}), so the best measured candidate was written", []
        contenders = self.contenders(rule)
        if not contenders:
            return rule, "no candidate measured more images/s than the rule's plan, which is kept", []
        decisions = []
        for contender in contenders:
            decision = self._judge(rule, contender)
            decisions.append(decision)
            self.progress(f"tune: candidate {contender.number} against the rule's plan (#{rule.number}): "
                          f"{'chosen' if decision.verdict.departs else 'the rule is kept'}: {decision.verdict.reason}")
            if decision.verdict.departs:
                why = f"it won against the rule's plan (#{rule.number}) in alternating windows: {decision.verdict.reason}"
                return contender, why, decisions
        return rule, "the rule's plan is kept: " + "; ".join(f"#{d.contender}: {d.verdict.reason}" for d in decisions), decisions

    def _judge(self, rule: Trial, contender: Trial) -> Decision:
        cap, both = self.goal.memory_mb, self._both_mb(rule, contender)
        if self.compare is None:
            return Decision(contender.number, rule.number, None, Verdict(False, "no comparison could be run"))
        if cap is not None and both is not None and both > cap:
            return Decision(
                contender.number,
                rule.number,
                None,
                Verdict(
                    False,
                    f"both served at once would need an estimated {both:,.0f} MiB, over the cap of {cap:,.0f} MiB, so they "
                    "could not be compared",
                ),
            )
        if self.deadline - self.clock() < self.decision_cost_s():
            return Decision(contender.number, rule.number, None, Verdict(False, "no time was left to compare it with the rule's plan"))

        def settled(rule_windows: list[Window], contender_windows: list[Window]) -> str:
            return cannot_win(rule_windows, contender_windows, self.goal)

        compared = self.compare(rule.candidate, contender.candidate, settled, self.deadline)
        if compared.error:
            return Decision(
                contender.number, rule.number, compared, Verdict(False, f"the comparison failed: {compared.error.splitlines()[0]}")
            )
        return Decision(contender.number, rule.number, compared, verdict(compared.rule, compared.contender, self.goal, self.decision_pairs))

    def _unmeasured_rule(self) -> Trial:
        trial = Trial(len(self.trials) + 1, "rule", self.space.coarse()[-1], Measurement(error=UNMEASURED_RULE))
        self.trials.append(trial)
        return trial

    def _both_mb(self, rule: Trial, contender: Trial) -> float | None:
        estimates = [self.memory.estimate_mb(t.candidate) for t in (rule, contender)]
        return None if None in estimates else sum(estimates)

    def _skipped_rule(self) -> str:
        rule = self.space.coarse()[-1]
        return next((f"skipped: {t.skipped}" for t in self.trials if t.candidate == rule and t.skipped), "")

    def decision_cost_s(self) -> float:
        """What one comparison takes: two servers started, warmed up and stopped, and its pairs of windows."""
        if self.compare is None:
            return 0.0
        overheads = [t.measurement.seconds - t.measurement.load_s for t in self.trials if t.measurement and t.measurement.load_s]
        return 2 * max(overheads, default=0.0) + 2 * self.decision_pairs * self.decision_window_s

    def best(self) -> Trial | None:
        judged = self._judged()
        return max(judged, key=lambda t: score(t, self.goal)) if judged else None

    def _judged(self) -> list[Trial]:
        """One trial per fully measured candidate, holding all its measurements together."""
        by_candidate: dict[Candidate, list[Trial]] = {}
        for trial in self.trials:
            if trial.measured:
                by_candidate.setdefault(trial.candidate, []).append(trial)
        return [_together(trials) for trials in by_candidate.values()]

    def _time_for_another(self, with_comparison: bool = True) -> bool:
        """Start another candidate only if the time left covers the longest one so far and a comparison after it."""
        longest = max((t.measurement.seconds for t in self.trials if t.measurement), default=0.0)
        return self.deadline - self.clock() > max(longest, 1.0) + (self.decision_cost_s() if with_comparison else 0.0)

    def _try(self, candidate: Candidate, phase: str, early_stop: bool = True) -> Trial | None:
        self.tried.add(candidate)
        trial = Trial(len(self.trials) + 1, phase, candidate, estimated_mb=self.memory.estimate_mb(candidate))
        self.trials.append(trial)
        cap = self.goal.memory_mb
        if cap is not None and trial.estimated_mb is not None and trial.estimated_mb > cap:
            trial.skipped = f"estimated {trial.estimated_mb:,.0f} MiB > cap {cap:,.0f} MiB"
            self.progress(f"tune: candidate {trial.number} skipped: {candidate.describe()}: {trial.skipped}")
            return None
        rule = self._early_stop_rule() if early_stop else (lambda first: "")
        trial.measurement = self.measure(candidate, rule, self.deadline)
        self.memory.learn(trial.measurement.frontend_rss_mb, trial.measurement.worker_rss_mb)
        self.progress(self._progress_line(trial))
        return trial

    def _early_stop_rule(self) -> Callable[[Measurement], str]:
        best = self.best()
        bar = score(best, self.goal) if best else None

        def rule(first: Measurement) -> str:
            if first.errors and first.errors == first.requests:
                return f"every request of the first window failed ({first.errors})"
            if not bar or bar[0] == 0:  # nothing meets the goals yet: every full measurement helps the climb
                return ""
            if self.goal.p99_ms is not None and first.p99_ms is not None and first.p99_ms > 2 * self.goal.p99_ms:
                return f"p99 {first.p99_ms:,.0f} ms in the first window, over twice the goal"
            if (first.img_s or 0) < self.early_stop_share * bar[1]:
                return f"{first.img_s or 0:.1f} img/s in the first window, under {self.early_stop_share:.0%} of the best ({bar[1]:.1f})"
            return ""

        return rule

    def at_most(self) -> int:
        """The most candidates this search can still come to: those tried plus what the time left buys."""
        costs = [t.measurement.seconds for t in self.trials if t.measurement and t.measurement.seconds > 0]
        left = max(0.0, self.deadline - self.clock())
        more = math.floor(left / max(costs)) if costs else len(self.space.coarse())
        return min(len(self.trials) + more, self.space.size())

    def _progress_line(self, trial: Trial) -> str:
        m = trial.measurement
        if m.error:
            outcome = f"failed: {m.error.splitlines()[0]}"
        else:
            outcome = f"{m.img_s or 0:.1f} img/s, p99 {m.p99_ms or 0:,.0f} ms, {m.peak_rss_mb or 0:,.0f} MiB" + (
                f" (stopped early: {m.stopped_early})" if m.stopped_early else ""
            )
        best = self.best()
        best_text = (
            (
                f"best so far: #{best.number} {best.measurement.img_s:.1f} img/s"
                + ("" if score(best, self.goal)[0] else " (misses the goal)")
            )
            if best
            else "no best yet"
        )
        return (
            f"tune: candidate {trial.number} of at most {self.at_most()} ({trial.phase}, {m.seconds:.0f} s): "
            f"{trial.candidate.describe()} -> {outcome}; {best_text}; {self.clock() - self.started:.0f} of "
            f"{self.budget_s:.0f} s used"
        )


def _together(trials: list[Trial]) -> Trial:
    """A candidate measured more than once, as one trial (numbered as its latest): the mean images/s (per
    model too), the worst p99 and the largest memory of its measurements."""
    if len(trials) == 1:
        return trials[0]
    measurements = [t.measurement for t in trials]
    latest = measurements[-1]
    per_model = {
        name: dict(
            model,
            img_s=statistics.mean(m.per_model[name].get("img_s") or 0 for m in measurements),
            p99_ms=max(m.per_model[name].get("p99_ms") or 0 for m in measurements),
        )
        for name, model in latest.per_model.items()
    }
    merged = replace(
        latest,
        img_s=statistics.mean(m.img_s for m in measurements),
        p50_ms=_largest(m.p50_ms for m in measurements),
        p99_ms=_largest(m.p99_ms for m in measurements),
        peak_rss_mb=_largest(m.peak_rss_mb for m in measurements),
        requests=sum(m.requests for m in measurements),
        errors=sum(m.errors for m in measurements),
        per_model=per_model,
        windows=[w for m in measurements for w in m.windows],
        load_s=sum(m.load_s for m in measurements),
    )
    return replace(trials[-1], measurement=merged)


def _largest(values) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None
