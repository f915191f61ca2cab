"""The tune's search on made-up measurements: a machine whose best config is known in advance.

The fake machine has a single best point for throughput, a p99 that grows with the batch, memory that
grows with the workers, a window-to-window wobble of known size, and a clock that only moves when a
candidate is measured or compared; so the tests can say exactly what the search must find, what it
must never run, and when it must have stopped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest

from tsvk_tools.tune.decide import Window
from tsvk_tools.tune.search import Comparison, Goal, Measurement, Search, clearly_better, problems_of, Trial
from tsvk_tools.tune.space import Candidate, ModelConfig, ModelLimits, Space

FRONTEND_MB, WORKER_MB = 300.0, 500.0


@dataclass
class FakeMachine:
    """img/s peaks at 2 workers x 2 threads, batch 4, delay 10 ms, inter-op 1 (on 4 vCPUs)."""

    best: ModelConfig = ModelConfig(2, 2, 1, 4, 10)
    start_s: float = 20.0
    window_s: float = 40.0
    decision_window_s: float = 10.0
    wobble: tuple[float, ...] = (0.0,)  # each window's img/s is off by these shares in turn (the machine's noise)
    now: float = 0.0
    runs: list[Candidate] = field(default_factory=list)
    comparisons: list[tuple[Candidate, Candidate, Comparison]] = field(default_factory=list)
    windows_measured: int = 0

    def clock(self) -> float:
        return self.now

    def img_s(self, c: ModelConfig) -> float:
        b = self.best
        return (100 - 12 * abs(c.workers - b.workers) - 6 * abs(c.intra - b.intra) - 8 * abs(math.log2(c.batch) - math.log2(b.batch))
                - 0.5 * abs(c.max_batch_delay_ms - b.max_batch_delay_ms) - 4 * (c.inter - 1))

    def window(self, candidate: Candidate) -> Window:
        (name, config), = candidate.models
        img_s = self.img_s(config) * (1 + self.wobble[self.windows_measured % len(self.wobble)])
        self.windows_measured += 1
        return Window(img_s, 100.0 * config.batch, 100, 0, {name: img_s}, self.window_s / 3)

    def measure(self, candidate: Candidate, stop_rule, deadline: float) -> Measurement:
        self.runs.append(candidate)
        (name, config), = candidate.models
        windows = [self.window(candidate) for _ in range(3)]
        img_s = sum(w.img_s for w in windows) / 3
        full = Measurement(img_s=img_s, p50_ms=50.0 * config.batch, p99_ms=100.0 * config.batch,
                           peak_rss_mb=FRONTEND_MB + config.workers * WORKER_MB, requests=100,
                           per_model={name: {"img_s": img_s}}, frontend_rss_mb=FRONTEND_MB, worker_rss_mb={name: WORKER_MB},
                           windows=windows, load_s=self.window_s)
        cost = self.start_s + self.window_s
        reason = stop_rule(full)
        if reason:
            full.stopped_early, cost, full.windows, full.load_s = reason, self.start_s + self.window_s / 3, windows[:1], self.window_s / 3
        if self.now + cost > deadline:  # a real measurement is cut at the deadline too
            self.now = deadline
            return Measurement(error="cut at the deadline", seconds=cost)
        self.now += cost
        full.seconds = cost
        return full

    def compare(self, rule: Candidate, contender: Candidate, settled, deadline: float, pairs: int = 3) -> Comparison:
        """Both started (a start each), then windows rule, contender, contender, rule, ... until `settled` says stop."""
        compared = Comparison(clients={"net": 16}, window_s=self.decision_window_s)
        self.now += 2 * self.start_s
        for pair in range(pairs):
            for side, candidate in (("rule", rule), ("contender", contender))[::1 if pair % 2 == 0 else -1]:
                if self.now + self.decision_window_s > deadline:
                    compared.stopped = "cut at the deadline"
                    break
                self.now += self.decision_window_s
                getattr(compared, side).append(self.window(candidate))
                compared.order.append(side)
                compared.stopped = settled(compared.rule, compared.contender)
                if compared.stopped:
                    break
            if compared.stopped:
                break
        self.comparisons.append((rule, contender, compared))
        return compared


def one_model_space(vcpus: int = 4, max_batch: int = 8) -> Space:
    return Space(vcpus, (ModelLimits("net", max_batch=max_batch, batch=8, max_batch_delay_ms=50),))


def search(machine: FakeMachine, goal: Goal = Goal(), budget_s: float = 10_000, space: Space | None = None) -> Search:
    return Search(space or one_model_space(), machine.measure, goal, budget_s, clock=machine.clock, progress=lambda line: None,
                  compare=machine.compare, decision_window_s=machine.decision_window_s)


RULE_PLAN = ModelConfig(4, 1, 1, 8, 50)  # what `tsvk config` plans on 4 vCPUs: 4 x 1 at the archive's batch and delay


def test_finds_the_known_optimum_and_it_wins_against_the_rule_plan():
    machine = FakeMachine()
    result = search(machine).run()
    assert result.chosen.candidate.of("net") == machine.best
    assert result.goal_met and result.stopped_because.startswith("no neighbour")
    searched = [t.candidate for t in result.trials]
    assert len(searched) == len(set(searched)), "a candidate was measured twice"
    (rule, contender, compared), = machine.comparisons
    assert rule.of("net") == RULE_PLAN and contender.of("net") == machine.best
    assert compared.order == ["rule", "contender", "contender", "rule", "rule", "contender"]
    assert result.decisions[0].verdict.departs and "slowest window beat the rule's fastest" in result.chosen_because


def test_a_candidate_within_the_noise_leaves_the_rule_plan():
    """The optimum is 4% faster than the rule's plan, but windows wobble by +-6%: the ranges overlap."""
    machine = FakeMachine(best=ModelConfig(4, 1, 1, 4, 50), wobble=(0.06, -0.06, 0.0, 0.03, -0.03))
    result = search(machine).run()
    assert result.chosen.candidate.of("net") == RULE_PLAN
    assert result.chosen.number == result.rule_plan.number
    assert machine.comparisons, "the contender was never compared with the rule's plan"
    assert not result.decisions[0].verdict.departs and "overlap" in result.decisions[0].verdict.reason


def test_a_comparison_stops_once_the_contender_cannot_win():
    """The contender's first window falls below the rule's first: no later window can make it win."""
    machine = FakeMachine(best=ModelConfig(4, 1, 1, 4, 50), wobble=(0.06, -0.06))
    result = search(machine).run()
    *_, compared = machine.comparisons[0]
    assert len(compared.order) < 6 and "overlap" in compared.stopped
    assert result.chosen.candidate.of("net") == RULE_PLAN


@dataclass
class LuckyOnce(FakeMachine):
    """A candidate measures 130 img/s in its exploration windows (a lucky minute), its true value after."""

    lucky: ModelConfig = ModelConfig(4, 1, 1, 4, 50)

    def img_s(self, c: ModelConfig) -> float:
        if c == self.lucky:
            return 130.0 if not self.comparisons and len(self.runs) and self.runs[-1].of("net") == c else 100.0
        return 100.0 if c == RULE_PLAN else 50.0


def test_a_lucky_exploration_is_caught_by_the_alternating_windows():
    machine = LuckyOnce(wobble=(0.02, -0.02, 0.0))
    result = search(machine).run()
    lucky = next(t for t in result.trials if t.candidate.of("net") == machine.lucky)
    assert lucky.measurement.img_s == pytest.approx(130.0)
    assert result.chosen.candidate.of("net") == RULE_PLAN
    assert [c.of("net") for _, c, _ in machine.comparisons][:1] == [machine.lucky]


def test_the_coarse_pass_asks_1xN_versus_Nx1_first():
    machine = FakeMachine()
    result = search(machine).run()
    coarse = [t.candidate.of("net") for t in result.trials if t.phase == "coarse"]
    assert [(c.workers, c.intra) for c in coarse] == [(1, 4), (2, 2), (4, 1)]


def test_meets_the_p99_goal_when_it_costs_throughput():
    machine = FakeMachine()
    result = search(machine, Goal(p99_ms=250)).run()  # p99 = 100 ms x batch: batch 2 at most
    chosen = result.chosen.candidate.of("net")
    assert result.goal_met and result.chosen.measurement.p99_ms <= 250
    assert (chosen.workers, chosen.intra, chosen.batch, chosen.max_batch_delay_ms) == (2, 2, 2, 10)


def test_never_starts_a_candidate_over_the_memory_cap():
    machine = FakeMachine(best=ModelConfig(4, 1, 1, 4, 10))  # the fastest needs 4 workers: 2,300 MiB
    cap = 1_500.0
    result = search(machine, Goal(memory_mb=cap)).run()
    over = [c for c in machine.runs if FRONTEND_MB + c.of("net").workers * WORKER_MB > cap]
    assert len(over) == 0, f"ran over the cap: {over}"
    assert result.chosen.measurement.peak_rss_mb <= cap and result.goal_met
    assert any(t.skipped.startswith("estimated") for t in result.trials)


def test_stops_within_the_budget_and_keeps_time_for_the_comparison():
    machine = FakeMachine()
    result = search(machine, budget_s=300).run()
    assert machine.now <= 300
    assert result.stopped_because.startswith("the budget ran out")
    assert len(machine.runs) == 3  # 60 s each, and 100 s kept back: 2 starts of 20 s, 6 windows of 10 s
    assert len(machine.comparisons) == 1 and len(machine.comparisons[0][2].order) == 6
    assert result.chosen is not None


def test_the_rule_plan_is_measured_before_time_is_kept_for_a_comparison():
    machine = FakeMachine()
    result = search(machine, budget_s=130).run()  # 60 s a candidate; a comparison would need 100 s more
    assert [c.of("net").workers for c in machine.runs] == [1, 4], "the rule's plan was not measured"
    assert result.chosen.candidate.of("net") == RULE_PLAN and not machine.comparisons


def test_the_rule_plan_is_written_when_the_budget_ends_before_it_is_measured():
    machine = FakeMachine()
    result = search(machine, budget_s=100).run()  # one candidate of 60 s, then no time for the rule's plan
    assert [c.of("net").workers for c in machine.runs] == [1]
    assert result.chosen.candidate.of("net") == RULE_PLAN and result.chosen.measurement.error
    assert not result.goal_met and "budget ran out before the rule's plan was measured" in result.chosen_because


def test_a_slow_candidate_is_cut_at_the_deadline_not_after_it():
    machine = FakeMachine(start_s=30, window_s=30)
    budget = search(machine, budget_s=250)
    machine.start_s = 10  # the first ones are quick, so the search thinks another fits ...
    budget.measure = lambda c, rule, deadline: _slow_after_first(machine, c, rule, deadline)
    result = budget.run()
    assert machine.now <= 250
    cut = [t for t in result.trials if t.measurement and t.measurement.error == "cut at the deadline"]
    assert cut and cut[-1].candidate.of("net") == RULE_PLAN
    assert result.chosen.candidate.of("net") == RULE_PLAN, "the rule's plan was cut, and nothing else was compared with it"


def _slow_after_first(machine: FakeMachine, candidate, rule, deadline):
    if len(machine.runs) >= 2:
        machine.start_s = 200  # ... but this one takes far longer
    return machine.measure(candidate, rule, deadline)


def test_candidates_that_clearly_lose_stop_early():
    machine = FakeMachine(best=ModelConfig(1, 4, 1, 8, 50))  # the first coarse point is the best
    result = search(machine).run()
    stopped = [t for t in result.trials if t.measurement and t.measurement.stopped_early]
    assert stopped and all(t.measurement.img_s < 0.6 * 100 for t in stopped)
    assert result.chosen.candidate.of("net") == machine.best


def test_an_unreachable_floor_is_reported_with_the_best_there_is():
    machine = FakeMachine()
    result = search(machine, Goal(min_img_s=150)).run()
    assert not result.goal_met
    assert result.chosen.candidate.of("net") == machine.best
    assert result.problems == ["net 100.0 img/s < 150 img/s"]


def test_a_missed_goal_prefers_the_smallest_miss():
    machine = FakeMachine()
    result = search(machine, Goal(p99_ms=50)).run()  # even batch 1 has p99 100 ms
    assert not result.goal_met and result.chosen.candidate.of("net").batch == 1
    assert "p99 100 ms > 50 ms" in result.problems


def test_noise_does_not_move_the_climb():
    goal = Goal()
    old = Trial(1, "coarse", None, Measurement(img_s=100, per_model={}))
    assert not clearly_better(Trial(2, "climb", None, Measurement(img_s=102, per_model={})), old, goal)
    assert clearly_better(Trial(3, "climb", None, Measurement(img_s=104, per_model={})), old, goal)
    assert problems_of(Trial(4, "climb", None, Measurement(img_s=1, requests=10, errors=2)), goal) == ["2 of 10 requests failed"]


def test_two_models_share_the_cores():
    space = Space(4, (ModelLimits("a", 8, 8, 50), ModelLimits("b", 4, 4, 50)))
    assert all(space.fits(c) for c in space.coarse())
    start = space.coarse()[0]
    assert [(c.workers, c.intra) for _, c in start.models] == [(1, 2), (1, 2)]
    neighbours = space.neighbours(start)
    assert neighbours and all(n.threads <= 4 for n in neighbours)
    assert all(c.batch <= 4 for n in neighbours for name, c in n.models if name == "b")


@pytest.mark.parametrize("vcpus, splits", [(1, [(1, 1)]), (2, [(1, 2), (2, 1)]), (6, [(1, 6), (2, 3), (4, 1), (6, 1)])])
def test_coarse_splits(vcpus, splits):
    assert [(c.of("net").workers, c.of("net").intra) for c in one_model_space(vcpus).coarse()] == splits


def test_the_rule_plan_stays_when_nothing_beats_it():
    machine = FakeMachine(best=RULE_PLAN)
    result = search(machine).run()
    assert result.chosen.candidate.of("net") == RULE_PLAN and not machine.comparisons
    assert "no candidate measured more images/s than the rule's plan" in result.chosen_because


def test_the_rule_plan_stays_when_no_time_is_left_to_compare():
    machine = FakeMachine()
    budget = search(machine, budget_s=10_000)
    budget.compare = None  # no comparison can be run
    result = budget.run()
    assert result.chosen.candidate.of("net") == RULE_PLAN
    assert "no comparison could be run" in result.chosen_because
