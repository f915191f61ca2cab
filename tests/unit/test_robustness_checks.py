"""Every check of `tsvk robustness` and `tsvk soak` fails when its evidence is empty or missing: a run
that measured nothing (no answers, no worker found, a management API that did not answer, a metric
not scraped, no address probed) cannot pass."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import pytest

from tsvk_tools.lab.robustness import checks
from tsvk_tools.lab.robustness.checks import Probe
from tsvk_tools.lab.robustness.soak_report import summarize

# check -> (fixed arguments that are not evidence, {evidence argument: [missing, empty, ...]})
CASES = {
    checks.inputs_counted: ({}, {"sent": [None, 0], "answered": [None, 0]}),
    checks.statuses_allowed: ({"allowed": (200, 400)}, {"statuses": [None, {}, {"200": 0}]}),
    checks.no_server_errors: ({}, {"statuses": [None, {}]}),
    checks.all_status: ({"status": 200, "what": "requests"}, {"statuses": [None, []]}),
    checks.refused_with: ({"status": 413, "error": "image_too_large"}, {"answers": [None, []]}),
    checks.no_worker_died: ({}, {"before": [None, set()], "after": [None, set()]}),
    checks.below: ({"limit": 20.0, "what": "handler ms"}, {"value": [None, float("nan")]}),
    checks.grew_under: ({"limit_mb": 5.0}, {"before_mb": [None, {}], "after_mb": [None, {}]}),
    checks.any_refused: ({}, {"refused": [None, 0]}),
    checks.percentile_below: ({"q": 99, "limit": 1.0, "what": "503 seconds"}, {"values": [None, []]}),
    checks.all_answered: ({}, {"answered": [None], "requested": [None, 0]}),
    checks.slowest_below: ({"limit": 60.0, "what": "slowest"}, {"seconds": [None, []]}),
    checks.happened: ({"what": "READY again"}, {"seconds": [None]}),
    checks.at_least: ({"minimum": 3, "what": "worker starts"}, {"value": [None, 0]}),
    checks.key_refused: ({"what": "stale key"}, {"key_used": [None, ""], "error": [None]}),
    checks.invalid_key_refusal: ({"what": "no key"}, {"status": [None, 0], "error": [None]}),
    checks.refused: ({"what": "registration"}, {"status": [None, 0]}),
    checks.not_exposed: ({}, {"listening": [None, {}], "probes": [None], "ports": [[]]}),
    checks.hostile_bounded: ({}, {"per_class": [None, {}, {"png bomb": {"hostile": True}},
                                                {"png bomb": {"hostile": True, "sent": 4}}]}),
    checks.good_answered_beside_hostile: ({}, {"good": [None, []]}),
    checks.no_accepted_lost: ({}, {"drain": [None, {}, {"accepted": 0, "lost": 0}]}),
    checks.exited_within_drain: ({}, {"drain": [None, {}, {"exit_s": 3.0}]}),
    checks.grpc_calls_answered: ({}, {"calls": [None, {}, {"sent": 0, "answered": 0}, {"sent": 16}]}),
    checks.drift_under: ({"goal_pct": 5.0, "what": "RSS"}, {"drift_pct": [None]}),
    checks.none_failed: ({"what": "good requests"}, {"total": [None, 0], "failures": [None]}),
    checks.no_growth: ({"what": "open files"}, {"growth": [None]}),
    checks.same_handler: ({}, {"differences": [None]}),
    checks.closed_within: ({"bounds_s": {"idle": 10.0}, "margin_s": 2.0},
                           {"kinds": [None, {}, {"idle": {}}, {"idle": {"closed_by_server": 0, "close_after_s": None}}]}),
    checks.refused_beyond_bound: ({"past": 100}, {"answers": [None, {}, {"503": 0}]}),
}
# Evidence that passes, so each missing or empty piece is the only reason a case fails.
PASSING = {
    checks.inputs_counted: {"sent": 10_000, "answered": 10_000},
    checks.statuses_allowed: {"statuses": {"200": 3, "400": 1}},
    checks.no_server_errors: {"statuses": {"200": 3}},
    checks.all_status: {"statuses": [200, 200]},
    checks.refused_with: {"answers": [(413, "image_too_large")]},
    checks.no_worker_died: {"before": {11, 12}, "after": {11, 12}},
    checks.below: {"value": 3.0},
    checks.grew_under: {"before_mb": {"worker 1": 500.0}, "after_mb": {"worker 1": 501.0}},
    checks.any_refused: {"refused": 40},
    checks.percentile_below: {"values": [0.01, 0.2]},
    checks.all_answered: {"answered": 400, "requested": 400},
    checks.slowest_below: {"seconds": [1.0, 2.0]},
    checks.happened: {"seconds": 4.5},
    checks.at_least: {"value": 3},
    checks.key_refused: {"key_used": "abc", "error": "InvalidKeyException"},
    checks.invalid_key_refusal: {"status": 400, "error": "InvalidKeyException"},
    checks.refused: {"status": 400},
    checks.not_exposed: {"listening": {8081: ["127.0.0.1"], 7071: ["::1"]}, "probes": [Probe("10.0.0.5", 8081, False)],
                         "ports": [8081, 7071]},
    checks.hostile_bounded: {"per_class": {"png bomb": {"hostile": True, "sent": 4, "extra_worker_s_per_input": 0.01,
                                                        "extra_worker_growth_mb": 2.0}}},
    checks.good_answered_beside_hostile: {"good": [(200, True)]},
    checks.no_accepted_lost: {"drain": {"accepted": 30, "lost": 0}},
    checks.exited_within_drain: {"drain": {"exit_s": 3.0, "drain_timeout_s": 30.0}},
    checks.grpc_calls_answered: {"calls": {"sent": 16, "answered": 16, "answered_after_stop_began": 9}},
    checks.drift_under: {"drift_pct": 1.0},
    checks.none_failed: {"total": 100, "failures": 0},
    checks.no_growth: {"growth": 0},
    checks.same_handler: {"differences": []},
    checks.closed_within: {"kinds": {"idle": {"closed_by_server": 40, "close_after_s": {"max": 10.3}}}},
    checks.refused_beyond_bound: {"answers": {"503": 150, "200": 450}},
}


def _cases():
    for check, (fixed, evidence) in CASES.items():
        for argument, values in evidence.items():
            for value in values:
                yield pytest.param(check, {**fixed, **PASSING[check], argument: value}, id=f"{check.__name__}-{argument}={value!r}"[:90])


@pytest.mark.parametrize("check,arguments", list(_cases()))
def test_each_check_fails_without_its_evidence(check, arguments):
    verdict = check(**arguments)
    assert not verdict.ok and verdict.reason


@pytest.mark.parametrize("check", list(CASES), ids=lambda c: c.__name__)
def test_each_check_holds_with_its_evidence(check):
    verdict = check(**{**CASES[check][0], **PASSING[check]})
    assert verdict.ok, verdict.reason


def test_every_check_is_covered():
    public = {f for name, f in inspect.getmembers(checks, inspect.isfunction)
              if f.__module__ == checks.__name__ and not name.startswith("_")
              and f not in (checks.held, checks.failed, checks.judged, checks.judged_with_weaknesses)}
    assert public == set(CASES)


def test_a_dead_worker_a_slow_bomb_and_an_exposed_port_fail():
    assert not checks.no_worker_died({11, 12}, {11, 13})
    assert not checks.below(25.0, 20.0, "handler ms")
    assert not checks.grew_under({"worker 1": 500.0}, {"worker 1": 600.0}, 5.0)
    assert not checks.grew_under({"worker 1": 500.0}, {"worker 2": 500.0}, 5.0)  # the measured worker is gone
    assert not checks.inputs_counted(10_000, 9_999)
    assert not checks.not_exposed({8081: ["0.0.0.0"]}, [], [8081])
    assert not checks.not_exposed({8081: ["::"]}, [], [8081])
    assert checks.not_exposed({8081: ["::ffff:127.0.0.1"]}, [], [8081])
    assert not checks.not_exposed({8081: ["127.0.0.1"]}, [Probe("fe80::1%eth0", 8081, True)], [8081])
    assert not checks.not_exposed({8081: ["127.0.0.1"]}, [], [8081, 9090])  # 9090 never found listening
    assert not checks.no_server_errors({"200": 5, "0": 1})
    assert not checks.grpc_calls_answered({"sent": 16, "answered": 12, "statuses": {"OK": 12, "CANCELLED": 4}})
    assert not checks.closed_within({"idle": {"closed_by_server": 5, "close_after_s": {"max": 12.5}}}, {"idle": 10.0}, 2.0)  # late
    assert not checks.closed_within({"idle": {"closed_by_server": 5, "close_after_s": {"max": 1.0}}}, {"idle": 1.0, "keep-alive": 5.0}, 1.0)
    assert not checks.refused_beyond_bound({"503": 10, "ConnectionResetError": 1}, 100)  # one went unanswered
    assert not checks.refused_beyond_bound({"200": 600}, 100)  # no bound at all
    assert checks.no_server_errors({"200": 5, "503": 1}, allowed_5xx=(503,))


SOAK_ARGS = SimpleNamespace(minutes=20, load=0.7, malformed=0.05, warmup_minutes=2)


def _minute(i: int, **changes) -> dict:
    return {"minute": i, "good": 100, "good_errors": 0, "malformed": 5, "malformed_5xx": 0, "p50_ms": 200.0, "p99_ms": 500.0,
            "skipped": 0, "rss_mb": {"frontend": 280.0, "worker 1": 900.0}, "fds": {"frontend": 60}, **changes}


@pytest.mark.parametrize("changes,check", [
    ({"rss_mb": {}}, "RSS drift under 5%"),  # no process found
    ({"p99_ms": None}, "p99 drift under 10%"),  # no good answer timed
    ({"fds": {}}, "no open-file growth"),
    ({"malformed": 0}, "no 5xx on malformed requests"),  # none sent
])
def test_soak_checks_fail_without_evidence(changes, check):
    figures = summarize([_minute(i, **changes) for i in range(20)], 26.0, 18.2, SOAK_ARGS)
    assert figures["checks"][check] is False and figures["reasons"][check]


def test_a_soak_with_no_good_minutes_fails_every_check():
    figures = summarize([_minute(i, good=0, malformed=0, p99_ms=None, rss_mb={}, fds={}) for i in range(3)], 0.0, 0.0, SOAK_ARGS)
    assert not any(figures["checks"].values())


def test_a_soak_with_one_steady_minute_has_no_drift_to_judge():
    """One minute after warm-up would be compared with itself (a drift of 0): the drift checks fail instead."""
    figures = summarize([_minute(i) for i in range(3)], 26.0, 18.2, SOAK_ARGS)  # minutes 0, 1 warm up; minute 2 steady
    assert figures["rss_drift_pct"] is None and figures["p99_drift_pct"] is None
    assert figures["checks"]["RSS drift under 5%"] is False and figures["checks"]["p99 drift under 10%"] is False
    assert "not measured" in figures["reasons"]["p99 drift under 10%"]
    two_windows = summarize([_minute(i) for i in range(4)], 26.0, 18.2, SOAK_ARGS)
    assert two_windows["checks"]["p99 drift under 10%"] is True and two_windows["p99_drift_pct"] == 0.0


def test_a_report_without_checks_does_not_pass():
    from datetime import datetime, timezone

    from tsvk_tools.lab.robustness.result_files import envelope

    assert envelope("robustness", 2, {"fuzz": {"inputs": 0}}, datetime.now(timezone.utc))["passed"] is False
