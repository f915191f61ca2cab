"""The tune's report on a made-up search: each candidate's windows, the rule's plan, the comparison and its verdict."""

from __future__ import annotations

import json

from tests.unit.test_tune_search import RULE_PLAN, FakeMachine, search
from tsvk_tools.tune.tune_outputs import result_document, write_results
from tsvk_tools.tune.search import Goal
from tsvk_tools.tune.space import ModelConfig


CAP = Goal(memory_mb=24_000.0)


def context(goal: Goal = CAP) -> dict:
    return {"command": "tsvk tune --models net", "models": ["net"], "vcpus": 4, "machine": "x86_64",
            "goal": {"p99_ms": goal.p99_ms, "min_img_s": goal.min_img_s, "memory_mb": goal.memory_mb},
            "memory_cap_source": "given", "budget_s": 10_000, "window_s": 40, "output": "configs/tuned.properties",
            "decision_window_s": 10, "decision_pairs": 3}


def test_the_report_shows_windows_the_rule_plan_and_the_verdict(tmp_path):
    machine = FakeMachine(best=ModelConfig(4, 1, 1, 4, 50), wobble=(0.06, -0.06, 0.0, 0.03, -0.03))
    result = search(machine, CAP).run()
    document = result_document(result, context())
    written = write_results(json.loads(json.dumps(document)), tmp_path, "tune-net")
    text = (tmp_path / "tune-net.md").read_text()

    rule_row = next(line for line in text.splitlines() if "the rule's plan (`tsvk config`)" in line)
    assert RULE_PLAN.describe() in rule_row and "**chosen**" in rule_row
    rule = next(c for c in document["candidates"] if c["number"] == document["rule_plan"])
    low, high = rule["windows_img_s"]["min"], rule["windows_img_s"]["max"]
    assert low < high and f"({low:,.1f}-{high:,.1f})" in rule_row  # the spread of its windows, not one figure
    assert "against the rule's plan" in text and "Verdict: the rule is kept" in text and "overlap" in text
    assert "Why: the rule's plan is kept" in text
    assert [p.suffix for p in written] == [".json", ".md", ".png"] and written[2].stat().st_size > 0


def test_a_winning_contender_is_reported_as_replacing_the_rule(tmp_path):
    machine = FakeMachine()
    result = search(machine, CAP).run()
    document = result_document(result, context())
    write_results(json.loads(json.dumps(document)), tmp_path, "tune-net")
    text = (tmp_path / "tune-net.md").read_text()
    assert document["chosen"] != document["rule_plan"]
    assert "**the candidate replaces the rule**" in text and "slowest window beat the rule's fastest" in text
    comparison = document["decisions"][0]["comparison"]
    assert comparison["order"] == ["rule", "contender", "contender", "rule", "rule", "contender"]
