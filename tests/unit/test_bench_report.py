"""The result document: ratios from the same run, goals judged against their targets, the Markdown
table and the files written beside it (timestamped and latest)."""

import json
from datetime import datetime, timezone

import pytest

from tsvk_tools.lab.bench.markdown import render_markdown
from tsvk_tools.lab.bench.options import BenchOptions
from tsvk_tools.lab.bench.result_document import build_result, compute_ratios, evaluate_goals, pipeline_ceiling, write_outputs

REQUIRED_RATIOS = ("ours_vs_decentralized", "ours_vs_torchserve_default", "ours_vs_torchserve_tuned", "ours_vs_compute_ceiling")


def _system(label, ips, p99, **extra):
    return {"label": label, "throughput_ips": ips, "latency_ms": {"p50": p99 / 2, "p95": p99 * 0.9, "p99": p99},
            "peak_cpu_pct": 190.0, "peak_rss_mb": 900.0, "ready_s": 12.0, "requests": 100, "errors": 0, **extra}


def _systems():
    return {
        "decentralized": _system("Decentralized", 0.5, 9000.0),
        "torchserve_default": _system("TorchServe, defaults", 2.0, 8000.0),
        "torchserve_tuned": _system("TorchServe, hand-tuned", 5.0, 3000.0, variant={"workers": 1, "threads": 2}),
        "ours": _system("tsvk (ours)", 5.5, 2900.0, profile={"per_batch": {"TsvkBatchSize": {"mean": 8.0},
                        "TsvkPreprocessMs": {"mean": 80.0}, "TsvkInferenceMs": {"mean": 1400.0}}}),
        "ceiling": _system("Ceiling", 6.5, 1300.0, details={"preprocess_images_per_s": 120.0, "decode_images_per_s": 400.0,
                                                             "images_per_s_by_batch": {"1": 5.0, "8": 6.5}}),
        "litserve": {"label": "LitServe", "error": "UsageError: LitServe exited during start-up"},
    }


@pytest.fixture
def result(tmp_path):
    options = BenchOptions(model="resnet152", systems=("decentralized", "torchserve_default", "torchserve_tuned", "ours",
                                                       "ceiling", "litserve"), command="tsvk bench --test")
    when = datetime(2026, 11, 22, 5, 10, tzinfo=timezone.utc)
    return build_result(options, 2, _systems(), when, when)


def test_ratios_are_ours_over_each_system(result):
    ratios = result["ratios"]
    for key in REQUIRED_RATIOS:
        assert key in ratios
    assert ratios["ours_vs_decentralized"] == 11.0
    assert ratios["ours_vs_torchserve_tuned"] == 1.1
    assert ratios["ours_vs_litserve"] is None  # failed systems give no ratio
    assert ratios["p99_ours_vs_torchserve_tuned"] == pytest.approx(0.967, abs=1e-3)


def test_pipeline_ceiling_combines_model_and_preprocessing():
    assert pipeline_ceiling({"throughput_ips": 6.0, "details": {"preprocess_images_per_s": 12.0}}) == 4.0
    assert pipeline_ceiling(None) is None


def test_goals_are_judged_against_their_targets(result):
    goals = {g["ratio"]: g for g in result["goals"]}
    assert goals["ours_vs_decentralized"]["met"] is True
    assert goals["ours_vs_torchserve_tuned"]["met"] is False  # 1.1 < 1.2
    assert goals["ours_vs_compute_ceiling"]["met"] is False  # 5.5 / 6.5 = 0.85 < 0.9
    assert goals["p99_ours_vs_torchserve_tuned"]["met"] is True


def test_task_goal_is_judged_on_the_fastest_cpu_artifact():
    systems = {name: {"throughput_ips": ips, "latency_ms": {"p99": 100.0}}
               for name, ips in (("torchserve_tuned", 10.0), ("ours", 9.0), ("ours_fast", 21.0))}
    goals = {g["ratio"]: g for g in evaluate_goals(systems, compute_ratios(systems), task="detect")}
    assert goals["fast_vs_torchserve_tuned"]["measured"] == 2.1 and goals["fast_vs_torchserve_tuned"]["met"] is True
    assert "ours_vs_torchserve_tuned" not in goals


def test_the_tuned_config_is_judged_against_the_generated_one():
    systems = {"ours": {"throughput_ips": 30.0, "latency_ms": {"p99": 1000.0}, "spread": {"throughput_ips": [29.0, 31.0]}},
               "ours_tuned": {"throughput_ips": 28.8, "latency_ms": {"p99": 1050.0}, "spread": {"throughput_ips": [28.0, 29.5]}}}
    goals = {g["ratio"]: g for g in evaluate_goals(systems, compute_ratios(systems))}
    assert goals["ours_tuned_vs_ours"]["measured"] == 0.96 and goals["ours_tuned_vs_ours"]["met"] is False  # < 0.97
    assert goals["ours_tuned_vs_ours"]["ranges_overlap"] is True
    assert goals["p99_ours_tuned_vs_ours"]["measured"] == 1.05 and goals["p99_ours_tuned_vs_ours"]["met"] is False
    assert "ours_tuned_vs_ours" not in {g["ratio"] for g in evaluate_goals({"ours": systems["ours"]}, compute_ratios({}))}


def test_a_tuned_p99_within_the_rounds_spread_is_no_worse_and_one_beyond_it_is():
    def rows(tuned_p99_range):
        return {"ours": {"throughput_ips": 30.0, "latency_ms": {"p99": 1000.0}, "spread": {"p99": [950.0, 1040.0]}},
                "ours_tuned": {"throughput_ips": 30.1, "latency_ms": {"p99": 1020.0}, "spread": {"p99": tuned_p99_range}}}

    for p99_range, met in (([990.0, 1060.0], True), ([1045.0, 1090.0], False)):
        systems = rows(p99_range)
        goal = {g["ratio"]: g for g in evaluate_goals(systems, compute_ratios(systems))}["p99_ours_tuned_vs_ours"]
        assert goal["measured"] == 1.02 and goal["met"] is met


def test_the_kserve_engine_is_judged_against_torchserve_the_best_peer_and_its_own_predictions():
    def row(ips, p99):
        return {"throughput_ips": ips, "latency_ms": {"p99": p99}}

    systems = {"ours_fast": row(40.0, 900.0), "ours_kserve_fast": row(43.0, 800.0), "triton": row(30.0, 850.0),
               "ours_kserve": row(20.0, 1500.0), "ours_kserve_oip_rest": row(19.4, 1520.0), "ours_kserve_oip_grpc": row(18.0, 1600.0)}
    goals = {g["ratio"]: g for g in evaluate_goals(systems, compute_ratios(systems))}
    assert goals["kserve_fast_vs_ours_fast"]["measured"] == 1.075 and goals["kserve_fast_vs_ours_fast"]["met"] is True
    assert goals["kserve_fast_vs_best_peer"]["measured"] == pytest.approx(1.433, abs=1e-3)
    assert goals["kserve_fast_vs_best_peer"]["met"] is True
    assert goals["p99_kserve_fast_vs_best_peer"]["met"] is True  # 800 ms against triton's 850
    assert goals["ours_kserve_oip_rest_vs_ours_kserve"]["met"] is True  # 0.97
    assert goals["ours_kserve_oip_grpc_vs_ours_kserve"]["met"] is False  # 0.9 < 0.95


def test_goals_without_measurements_are_undecided():
    goals = evaluate_goals({}, compute_ratios({}))
    assert all(g["met"] is None for g in goals)


def test_markdown_has_one_row_per_system_and_the_goals(result):
    text = render_markdown(result, "latest.png")
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| System")]
    assert any(r.startswith("| tsvk (ours) | 5.50 |") for r in rows)
    assert any("LitServe | failed: UsageError" in r for r in rows)
    assert "(best: 1 worker(s) x 2 thread(s))" in text
    assert "| ours >= 1.2x best hand-tuned stock TorchServe | 1.2 | 1.10 | **no** |" in text
    assert "![throughput and p99 latency](latest.png)" in text
    assert "Command: `tsvk bench --test`" in text


def test_diagnosis_explains_the_worker_split(result):
    text = " ".join(result["diagnosis"])
    assert "batches averaged 8.0 images" in text
    assert "preprocessing is 5%" in text


def test_outputs_are_timestamped_and_latest_links_to_them(result, tmp_path):
    written = write_outputs(result, tmp_path, tag="central")
    assert written["json"].name == "20261122T051000Z-central.json"
    latest = json.loads((tmp_path / "latest-central.json").read_text())
    assert latest["ratios"] == result["ratios"]
    assert set(latest) >= {"systems", "ratios", "goals", "options", "machine", "software", "git", "command"}
    for suffix in ("json", "md"):
        link = tmp_path / f"latest-central.{suffix}"
        assert link.is_symlink() and link.readlink().name == f"20261122T051000Z-central.{suffix}", "a link, not a copy"
    write_outputs({**result, "created": "2026-11-22T06:00:00+00:00"}, tmp_path, tag="central")
    assert (tmp_path / "latest-central.json").readlink().name == "20261122T060000Z-central.json"
    assert len(list(tmp_path.glob("*.json"))) == 3  # two runs and the link
    import matplotlib  # noqa: F401  # pinned in requirements.txt: a broken install must fail the suite, not skip it
    assert "20261122T060000Z-central.png" in (tmp_path / "latest-central.md").read_text()
    assert (tmp_path / "latest-central.png").resolve().stat().st_size < 200_000


def test_render_rewrites_the_report_from_a_saved_result(result, tmp_path):
    from tsvk_tools.lab.bench.bench_cli import main

    written = write_outputs(result, tmp_path)
    (tmp_path / "latest.md").unlink()
    assert main(["--render", str(written["json"])]) == 0
    assert "| tsvk (ours) | 5.50 |" in (tmp_path / "latest.md").read_text()
    assert main(["--render", str(tmp_path / "missing.json")]) == 2
