"""Rounds: medians with min-max, overlap of two systems' ranges, the time-bounded load of a round, and how the
report and chart show them (the strongest-peer table first, goals against the best peer, error bars)."""

from datetime import datetime, timezone

from tsvk_tools.lab.bench.chart import chart_title, error_bars
from tsvk_tools.lab.bench.harness import TIME_BOUNDED_JOBS, round_load, round_order
from tsvk_tools.lab.bench.markdown import render_markdown
from tsvk_tools.lab.bench.options import BenchOptions
from tsvk_tools.lab.bench.result_document import best_peer, build_result, compute_ratios, evaluate_goals
from tsvk_tools.measure.stats import combine_rounds, ranges_overlap, value_range


def _round(ips, p99, **extra):
    return {"label": "x", "throughput_ips": ips, "latency_ms": {"p50": p99 / 2, "p99": p99}, "requests": 100, "errors": 0,
            "loadavg": [3.0, 2.0, 1.0], **extra}


def test_combined_rounds_are_medians_with_their_ranges():
    combined = combine_rounds([_round(10.0, 900.0, details={"n": 1}), _round(12.0, 700.0, details={"n": 2}),
                               _round(11.0, 800.0, details={"n": 3})])
    assert combined["throughput_ips"] == 11.0
    assert combined["latency_ms"]["p99"] == 800.0
    assert combined["spread"] == {"throughput_ips": [10.0, 12.0], "p50": [350.0, 450.0], "p99": [700.0, 900.0]}
    assert combined["details"] == {"n": 3}  # the median round's own details
    assert combined["requests"] == 300 and len(combined["rounds"]) == 3


def test_a_failed_round_is_kept_but_not_counted_in_the_median():
    combined = combine_rounds([_round(10.0, 900.0), {"error": "RuntimeError: boom", "variant": {}}, _round(14.0, 700.0)])
    assert combined["throughput_ips"] == 12.0
    assert combined["round_errors"] == ["RuntimeError: boom"]
    assert "error" not in combined


def test_all_rounds_failed_keeps_the_error():
    combined = combine_rounds([{"error": "boom"}, {"error": "again"}])
    assert combined["error"] == "boom" and not combined.get("throughput_ips")


def test_ranges_overlap_when_they_share_a_value():
    assert ranges_overlap([1, 2], [2, 3]) is True
    assert ranges_overlap([1, 2], [2.1, 3]) is False
    assert ranges_overlap([5, 6], [1, 4.9]) is False
    assert ranges_overlap(None, [1, 2]) is None
    assert value_range([3, None, 1]) == [1, 3] and value_range([None]) is None


def test_a_round_is_bounded_by_time_unless_round_seconds_is_zero():
    assert round_load(BenchOptions(round_seconds=20, jobs=160), 100.0) == (TIME_BOUNDED_JOBS, 120.0)
    assert round_load(BenchOptions(round_seconds=0, jobs=160), 100.0) == (160, None)


def _spread(ips, p99, low, high):
    return {"label": "x", "throughput_ips": ips, "latency_ms": {"p50": p99 / 2, "p99": p99},
            "spread": {"throughput_ips": [low, high], "p99": [p99 * 0.9, p99 * 1.1]},
            "rounds": [{"loadavg": [5.5, 4.0, 3.0]}, {"loadavg": [7.5, 5.0, 3.0]}]}


def _peer_systems():
    return {
        "ours": _spread(8.0, 2000.0, 7.5, 8.5),
        "ours_fast": {**_spread(20.0, 900.0, 19.0, 21.0), "label": "tsvk fast"},
        "torchserve_best": {
            **_spread(6.0, 2500.0, 5.5, 6.5),
            "label": "TS best",
            "variant": {"backend": "inductor", "workers": 1, "threads": 2},
            "variants": [
                {"throughput_ips": 6.0},
                {"error": "AssertionError: sources must not be empty\nmore", "variant": {"backend": "openvino", "workers": 1}},
            ],
        },
        "triton": {**_spread(16.0, 1000.0, 14.0, 19.5), "label": "Triton"},
        "litserve_fast": {**_spread(15.0, 1100.0, 14.5, 15.5), "label": "LitServe fast"},
        "ceiling_pipeline_fast": {**_spread(21.0, 400.0, 20.5, 22.0), "label": "Pipeline ceiling"},
    }


def test_best_peer_is_the_fastest_median_and_goals_use_it():
    systems = _peer_systems()
    assert best_peer(systems) == "triton"
    ratios = compute_ratios(systems)
    assert ratios["fast_vs_best_peer"] == 1.25
    assert ratios["ours_vs_torchserve_best"] == round(8 / 6, 3)
    assert ratios["fast_vs_pipeline_fast_ceiling"] == round(20 / 21, 3)
    goals = {g["ratio"]: g for g in evaluate_goals(systems, ratios)}
    assert goals["fast_vs_best_peer"]["met"] is False and goals["fast_vs_best_peer"]["ranges_overlap"] is True
    assert goals["ours_vs_torchserve_best"]["met"] is True and goals["ours_vs_torchserve_best"]["ranges_overlap"] is False
    assert goals["p99_fast_vs_best_peer"]["met"] is True
    assert goals["fast_vs_pipeline_fast_ceiling"]["met"] is True


def test_markdown_leads_with_the_peer_table_and_names_failed_variants():
    options = BenchOptions(model="resnet50", systems=tuple(_peer_systems()), rounds=2, round_seconds=20, command="tsvk bench --x")
    when = datetime(2026, 11, 25, 20, 0, tzinfo=timezone.utc)
    text = render_markdown(build_result(options, 2, _peer_systems(), when, when))
    assert text.index("## Against the strongest peers") < text.index("## Every system")
    assert "| Triton | 16.00 (14.00-19.50) | 1,000 (900-1,100) | 1.25 | overlap |" in text
    assert "| LitServe fast | 15.00 (14.50-15.50) | 1,100 (990-1,210) | 1.33 | no |" in text
    assert "torchserve_best (backend openvino, workers 1) failed: AssertionError: sources must not be empty" in text
    assert "Load average (1 min) after the rounds: 5.5-7.5 on 2 vCPUs" in text


def test_chart_error_bars_reach_from_the_median_to_min_and_max():
    systems = _peer_systems()
    lows, highs = error_bars(systems, ["ours_fast", "triton"], "throughput_ips")
    assert lows == [1.0, 2.0] and highs == [1.0, 3.5]
    assert error_bars({"a": {"throughput_ips": 3.0}}, ["a"], "p99") == [[0.0], [0.0]]


def test_chart_title_names_host_date_and_commit():
    result = {
        "options": {"model": "resnet50", "concurrency": 16, "rounds": 3},
        "created": "2026-11-25T20:00:00+00:00",
        "machine": {"vcpus": 2, "host": "box", "cpu": "AMD EPYC"},
        "git": {"commit": "0123456789abcdef"},
    }
    title = chart_title(result)
    assert "host box (AMD EPYC)" in title and "2026-11-25T20:00" in title and "commit 0123456789" in title


def test_a_system_that_answers_no_warm_up_request_fails_before_its_load():
    import pytest

    from tsvk_tools.lab.bench.harness import require_an_answer
    from tsvk_tools.measure.loadgen import RequestRecord

    failed = RequestRecord(0.0, 1.0, 500, error="AssertionError: sources must not be empty")
    with pytest.raises(RuntimeError, match="none of 2 warm-up requests.*500 AssertionError: sources must not be empty"):
        require_an_answer([failed, failed])
    require_an_answer([failed, RequestRecord(0.0, 1.0, 200)])
    require_an_answer([])


def test_diagnosis_splits_ours_fast_against_its_pipeline_ceiling_and_lists_peer_variants():
    from tsvk_tools.lab.bench.diagnosis import explain

    systems = _peer_systems()
    systems["ours_fast"]["profile"] = {
        "per_batch": {"TsvkBatchSize": {"mean": 8.0}, "TsvkPreprocessMs": {"mean": 100.0}, "TsvkInferenceMs": {"mean": 250.0}}
    }
    systems["ceiling_pipeline_fast"]["details"] = {"best_batch": 8}
    text = "\n".join(explain(systems))
    assert "ours_fast / its pipeline ceiling = 0.95" in text
    assert "ours_fast: batches averaged 8.0 images; per batch 100 ms decode+preprocess and 250 ms inference" in text
    assert "torchserve_best tried: : 6.0 img/s; backend openvino, workers 1: failed (AssertionError: sources must not be empty)" in text


def test_diagnosis_bounds_what_serving_alone_can_win_over_a_peer_with_the_same_graph():
    from tsvk_tools.lab.bench.diagnosis import explain

    systems = _peer_systems()
    systems["ours_fast"]["details"] = {"plan": {"workers": 2}}
    systems["ours_fast"]["profile"] = {
        "per_batch": {"TsvkBatchSize": {"mean": 8.0}, "TsvkPreprocessMs": {"mean": 90.0}, "TsvkInferenceMs": {"mean": 800.0}}
    }
    text = "\n".join(explain(systems))
    assert "would serve 20.0 img/s = 1.25x the best peer (triton, 16.0 img/s)" in text


def test_cpu_per_image_by_process_is_reported_and_set_against_the_best_peer():
    from tsvk_tools.lab.bench.diagnosis import explain
    from tsvk_tools.measure.stats import cpu_ms_per_image

    systems = _peer_systems()
    systems["ours_fast"]["mean_cpu_pct_by_process"] = {"model_service_worker.py": 176.0, "java": 12.0, "load generator": 8.0}
    systems["triton"]["mean_cpu_pct_by_process"] = {"tritonserver": 40.0, "triton_python_backend_stub": 150.0, "idle": 0.0}
    assert cpu_ms_per_image(systems["ours_fast"]) == {"model_service_worker.py": 88.0, "java": 6.0, "load generator": 4.0}
    assert cpu_ms_per_image({"mean_cpu_pct_by_process": {"java": 5.0}}) == {}  # no throughput: nothing per image
    text = "\n".join(explain(systems))
    assert (
        "CPU per answered image, by process: ours_fast 98.0 ms (model_service_worker.py 88.0, java 6.0, load generator 4.0); "
        "triton 118.8 ms (triton_python_backend_stub 93.8, tritonserver 25.0)."
    ) in text
    options = BenchOptions(model="resnet50", systems=tuple(systems), rounds=2, round_seconds=20)
    when = datetime(2026, 11, 25, 20, 0, tzinfo=timezone.utc)
    markdown = render_markdown(build_result(options, 2, systems, when, when))
    assert "| tsvk fast | 98.0 | model_service_worker.py 88.0 (176%), java 6.0 (12%), load generator 4.0 (8%) |" in markdown


def test_cpu_bound_says_whether_a_goal_is_within_reach_at_the_measured_cpu_per_image():
    from tsvk_tools.lab.bench.diagnosis import explain

    systems = _peer_systems()
    systems["ours_fast"]["mean_cpu_pct_by_process"] = {"model_service_worker.py": 176.0, "java": 12.0, "load generator": 8.0}
    systems["ours"]["mean_cpu_pct_by_process"] = {"model_service_worker.py": 180.0, "java": 10.0}
    text = "\n".join(explain(systems, vcpus=2))
    assert (
        "ours_fast spent 98.0 ms of CPU per answered image and kept the 2 vCPUs 196% busy (of 200%): with every vCPU "
        "busy all the time it could answer at most 20.4 img/s = 1.28x triton (16.0 img/s); 1.3x is out of reach at this "
        "CPU cost: it needs at most 96.2 ms per image."
    ) in text
    assert (
        "ours spent 237.5 ms of CPU per answered image and kept the 2 vCPUs 190% busy (of 200%): with every vCPU busy "
        "all the time it could answer at most 8.4 img/s = 1.40x torchserve_best (6.0 img/s); 1.2x is within reach of "
        "this CPU cost."
    ) in text
    assert "could answer at most" not in "\n".join(explain(systems))  # no vCPU count (an old result): no bound claimed


def test_each_round_runs_the_systems_in_the_other_order_from_the_last():
    systems = ["ours", "ours_tuned", "ceiling"]
    assert [round_order(systems, n) for n in (1, 2, 3)] == [systems, systems[::-1], systems]
