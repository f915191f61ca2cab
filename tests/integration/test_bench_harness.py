"""The benchmark harness end to end on a tiny model (mobilenet_v3_small, random weights, eager
backend so nothing compiles for minutes): every system starts, answers real photographs, is stopped
with no process left behind, and the report files are well formed. Nothing here is timed."""

from __future__ import annotations

import json
import shutil

import pytest

from tsvk_tools.lab.bench.harness import run_benchmark
from tsvk_tools.lab.bench.options import BenchOptions
from tsvk_tools.lab.bench.result_document import write_outputs
from tsvk_tools.lab.bench.bench_cli import main

pytestmark = pytest.mark.integration

MODEL = "mobilenet_v3_small"
TINY = dict(
    model=MODEL,
    backend="eager",
    jobs=8,
    rounds=1,
    round_seconds=0,
    concurrency=4,
    decentralized_jobs=2,
    ceiling_seconds=0.3,
    warmup=2,
    images=("skimage:chelsea", "skimage:coffee"),
)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    """Weights and archives built once for the module."""
    return tmp_path_factory.mktemp("bench-cache")


def _assert_served_and_stopped(system: dict, requests: int) -> None:
    assert "error" not in system, system.get("error")
    assert system["requests"] == requests and system["errors"] == 0
    assert system["throughput_ips"] > 0
    assert system["latency_ms"]["p99"] >= system["latency_ms"]["p50"] > 0
    assert system["peak_rss_mb"] > 0 and system["processes_seen"] >= 1
    assert system["leftover_processes"] == []
    assert set(system["top1"]) == {"0", "1"}


@pytest.mark.skipif(shutil.which("java") is None, reason="TorchServe needs Java 17")
def test_central_figure_cli_runs_stock_defaults_and_ours(cache_dir, tmp_path):
    status = main(
        [
            "--central-figure",
            "--model",
            MODEL,
            "--backend",
            "eager",
            "--jobs",
            "8",
            "--rounds",
            "1",
            "--round-seconds",
            "0",
            "--concurrency",
            "4",
            "--warmup",
            "2",
            "--image",
            "skimage:chelsea,skimage:coffee",
            "--cache-dir",
            str(cache_dir),
            "--output-dir",
            str(tmp_path),
        ]
    )
    assert status == 0
    result = json.loads((tmp_path / "latest-central.json").read_text())
    assert list(result["systems"]) == ["torchserve_default", "ours"]
    for system in result["systems"].values():
        _assert_served_and_stopped(system, 8)
    assert result["ratios"]["ours_vs_torchserve_default"] > 0
    assert result["systems"]["ours"]["profile"]["per_batch"]["TsvkBatchSize"]["mean"] >= 1
    assert result["systems"]["ours"]["details"]["plan"]["backend"] == "eager"
    markdown = (tmp_path / "latest-central.md").read_text()
    assert "| TorchServe, defaults |" in markdown and "| tsvk (ours) (" in markdown


@pytest.mark.skipif(shutil.which("java") is None, reason="TorchServe needs Java 17")
def test_hand_tuned_stock_gets_its_threads_through_the_environment(cache_dir):
    result = run_benchmark(BenchOptions(**TINY, systems=("torchserve_tuned",), vcpus=1, cache_dir=cache_dir), log=lambda _: None)
    tuned = result["systems"]["torchserve_tuned"]
    _assert_served_and_stopped(tuned, 8)
    assert tuned["variant"] == {"workers": 1, "threads": 1}
    assert [w["OMP_NUM_THREADS"] for w in tuned["details"]["worker_env"]] == ["1"]


def test_alternatives_and_ceiling_start_answer_and_stop(cache_dir, tmp_path):
    systems = ("decentralized", "flask_gunicorn", "litserve", "ceiling")
    result = run_benchmark(BenchOptions(**TINY, systems=systems, cache_dir=cache_dir), log=lambda _: None)
    for name in ("flask_gunicorn", "litserve"):
        _assert_served_and_stopped(result["systems"][name], 8)
    decentralized = result["systems"]["decentralized"]
    assert decentralized["requests"] == 2 and decentralized["errors"] == 0, decentralized.get("first_error")
    assert decentralized["leftover_processes"] == [] and decentralized["processes_seen"] >= 2
    ceiling = result["systems"]["ceiling"]
    assert ceiling["throughput_ips"] > 0 and ceiling["details"]["preprocess_images_per_s"] > 0
    assert ceiling["leftover_processes"] == []
    written = write_outputs(result, tmp_path)
    assert json.loads(written["json"].read_text())["ratios"]["ours_vs_compute_ceiling"] is None  # ours not run
