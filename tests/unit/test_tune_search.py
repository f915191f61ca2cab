"""The tune's search on made-up measurements: a machine whose best config is known in advance.

The fake machine has a single best point for throughput, a p99 that grows with the batch, memory that
grows with the workers, and a clock that only moves when a candidate is measured; so the tests can
say exactly what the search must find, what it must never run, and when it must have stopped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest

from tsvk_tools.tune.search import Goal, Measurement, Search, clearly_better, problems_of, Trial
from tsvk_tools.tune.space import Candidate, ModelConfig, ModelLimits, Space

FRONTEND_MB, WORKER_MB = 300.0, 500.0


@dataclass
class FakeMachine:
    """img/s peaks at 2 workers x 2 threads, batch 4, delay 10 ms, inter-op 1 (on 4 vCPUs)."""

    best: ModelConfig = ModelConfig(2, 2, 1, 4, 10)
    start_s: float = 20.0
    window_s: float = 40.0
    now: float = 0.0
    runs: list[Candidate] = field(default_factory=list)

    def clock(self) -> float:
        return self.now

    def img_s(self, c: ModelConfig) -> float:
        b = self.best
        return (100 - 12 * abs(c.workers - b.workers) - 6 * abs(c.intra - b.intra) - 8 * abs(math.log2(c.batch) - math.log2(b.batch))
                - 0.5 * abs(c.delay_ms - b.delay_ms) - 4 * (c.inter - 1))

    def measure(self, candidate: Candidate, stop_rule, deadline: float) -> Measurement:
        self.runs.append(candidate)
        (name, config), = candidate.models
        img_s = self.img_s(config)
        full = Measurement(img_s=img_s, p50_ms=50.0 * config.batch, p99_ms=100.0 * config.batch,
                           peak_rss_mb=FRONTEND_MB + config.workers * WORKER_MB, requests=100,
                           per_model={name: {"img_s": img_s}}, frontend_rss_mb=FRONTEND_MB, worker_rss_mb={name: WORKER_MB})
        cost = self.start_s + self.window_s
        reason = stop_rule(full)
        if reason:
            full.stopped_early, cost = reason, self.start_s + self.window_s / 3
        if self.now + cost > deadline:  # a real measurement is cut at the deadline too
            self.now = deadline
            return Measurement(error="cut at the deadline", seconds=cost)
        self.now += cost
        full.seconds = cost
        return full


def one_model_space(vcpus: int = 4, max_batch: int = 8) -> Space:
    return Space(vcpus, (ModelLimits("net", max_batch=max_batch, batch=8, delay_ms=50),))


def search(machine: FakeMachine, goal: Goal = Goal(), budget_s: float = 10_000, space: Space | None = None) -> Search:
    return Search(space or one_model_space(), machine.measure, goal, budget_s, clock=machine.clock, progress=lambda line: None)


def test_finds_the_known_optimum():
    machine = FakeMachine()
    result = search(machine).run()
    assert result.chosen.candidate.of("net") == machine.best
    assert result.goal_met and result.stopped_because.startswith("no neighbour")
    searched = [t.candidate for t in result.trials if t.phase != "confirm"]
    assert len(searched) == len(set(searched)), "a candidate was measured twice before the confirmation"


RULE_PLAN = ModelConfig(4, 1, 1, 8, 50)  # what `tsvk config` plans on 4 vCPUs: 4 x 1 at the archive's batch and delay


def test_the_leaders_and_the_rule_plan_are_measured_again():
    machine = FakeMachine(best=ModelConfig(4, 1, 1, 4, 10))
    result = search(machine).run()
    confirmed = [t.candidate.of("net") for t in result.trials if t.phase == "confirm"]
    assert result.chosen.candidate.of("net") in confirmed and RULE_PLAN in confirmed
    assert result.chosen.candidate.of("net") == machine.best


def search_judged(result) -> list[Trial]:
    """The chosen trial and the confirmed ones, as the search judged them (all measurements together)."""
    from tsvk_tools.tune.search import _together

    confirmed = {t.candidate for t in result.trials if t.phase == "confirm"}
    return [_together([t for t in result.trials if t.candidate == c and t.measured]) for c in confirmed]


@dataclass
class LuckyOnce(FakeMachine):
    """The rule's plan measures 130 img/s the first time (a lucky window), its true value after."""

    def img_s(self, c: ModelConfig) -> float:
        if c == RULE_PLAN and sum(1 for run in self.runs if run.of("net") == c) == 1:
            return 130.0
        return super().img_s(c)


def test_a_lucky_first_window_is_measured_again_and_averaged():
    machine = LuckyOnce()
    result = search(machine).run()
    assert sum(1 for run in machine.runs if run.of("net") == RULE_PLAN) == 2
    judged = {t.candidate.of("net"): t.measurement.img_s for t in search_judged(result)}
    assert judged[RULE_PLAN] == pytest.approx((130.0 + FakeMachine.img_s(machine, RULE_PLAN)) / 2)


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
    assert (chosen.workers, chosen.intra, chosen.batch, chosen.delay_ms) == (2, 2, 2, 10)


def test_never_starts_a_candidate_over_the_memory_cap():
    machine = FakeMachine(best=ModelConfig(4, 1, 1, 4, 10))  # the fastest needs 4 workers: 2,300 MiB
    cap = 1_500.0
    result = search(machine, Goal(memory_mb=cap)).run()
    over = [c for c in machine.runs if FRONTEND_MB + c.of("net").workers * WORKER_MB > cap]
    assert len(over) == 0, f"ran over the cap: {over}"
    assert result.chosen.measurement.peak_rss_mb <= cap and result.goal_met
    assert any(t.skipped.startswith("estimated") for t in result.trials)


def test_stops_within_the_budget():
    machine = FakeMachine()
    result = search(machine, budget_s=200).run()
    assert machine.now <= 200
    assert result.stopped_because.startswith("the budget ran out")
    assert 2 <= len(machine.runs) <= 4  # 60 s each (fewer when stopped early)
    assert result.chosen is not None


def test_a_slow_candidate_is_cut_at_the_deadline_not_after_it():
    machine = FakeMachine(start_s=30, window_s=30)
    budget = search(machine, budget_s=150)
    machine.start_s = 10  # the first ones are quick, so the search thinks another fits ...
    budget.measure = lambda c, rule, deadline: _slow_after_first(machine, c, rule, deadline)
    result = budget.run()
    assert machine.now <= 150
    assert any(t.measurement and t.measurement.error == "cut at the deadline" for t in result.trials)


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


def test_the_rule_plan_stays_unless_clearly_beaten():
    """A machine whose optimum is 2% better than the rule's plan: within the noise, so the plan stays."""

    @dataclass
    class NearlyFlat(FakeMachine):
        def img_s(self, c: ModelConfig) -> float:
            return 102.0 if c == ModelConfig(4, 1, 1, 4, 50) else 100.0 if c == RULE_PLAN else 60.0

    result = search(NearlyFlat()).run()
    assert result.chosen.candidate.of("net") == RULE_PLAN
