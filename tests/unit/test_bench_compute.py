"""GFLOP/s against the fp32 peak, and the fast rows' ratios and goals."""

from __future__ import annotations

import pytest

from tsvk_tools.lab.bench.compute import compute_use, cpu_facts, fp32_peak, gflop_per_image
from tsvk_tools.lab.bench.markdown import render_markdown
from tsvk_tools.lab.bench.result_document import compute_ratios, evaluate_goals, refresh

ZEN = "vendor_id\t: AuthenticAMD\ncpu MHz\t\t: 2596.134\nflags\t\t: fpu sse avx2 fma avx512f avx512_vnni\n"
XEON = "vendor_id\t: GenuineIntel\ncpu MHz\t\t: 2000.000\nflags\t\t: fpu avx2 fma avx512f\n"


def test_fp32_peak_counts_two_256_bit_fma_pipes_on_amd_and_two_512_bit_on_intel():
    assert fp32_peak(2, ZEN) == {"gflops": 166.2, "formula": "2 vCPUs x 2.60 GHz x 32 fp32 FLOP/cycle"}
    assert fp32_peak(4, XEON)["gflops"] == 512.0
    assert fp32_peak(2, "vendor_id : X\n") is None  # no clock, no peak
    assert cpu_facts(ZEN)["flags"] >= {"avx2", "fma"}


def test_resnet50_is_about_8_gflop_per_image():
    assert gflop_per_image("resnet50") == pytest.approx(8.18, abs=0.01)


def test_compute_use_is_throughput_times_work_per_image():
    systems = {"ours": {"throughput_ips": 10.0}, "broken": {"error": "x"}}
    use = compute_use(systems, 8.0, {"gflops": 160.0})
    assert use == {"ours": {"gflops": 80.0, "of_fp32_peak": 0.5}}


def test_fast_rows_give_their_ratios_and_goals():
    systems = {"ours": {"throughput_ips": 10.0, "latency_ms": {"p99": 900}},
               "ours_fast": {"throughput_ips": 30.0, "latency_ms": {"p99": 300}},
               "torchserve_tuned": {"throughput_ips": 8.0, "latency_ms": {"p99": 1200}},
               "ceiling": {"throughput_ips": 11.0}, "ceiling_fast": {"throughput_ips": 40.0}}
    ratios = compute_ratios(systems)
    assert (ratios["fast_vs_ours"], ratios["fast_vs_torchserve_tuned"], ratios["fast_ceiling_vs_ceiling"]) == (3.0, 3.75, 3.636)
    assert ratios["p99_fast_vs_torchserve_tuned"] == 0.25
    goals = {g["ratio"]: g["met"] for g in evaluate_goals(systems, ratios)}
    assert goals["fast_vs_ours"] is True and goals["fast_vs_torchserve_tuned"] is True
    slow = {**systems, "ours_fast": {"throughput_ips": 10.5}}
    assert {g["ratio"]: g["met"] for g in evaluate_goals(slow, compute_ratios(slow))}["fast_vs_ours"] is False


def test_the_report_shows_compute_use(tmp_path):
    result = {"options": {"model": "resnet50", "jobs": 1, "concurrency": 1}, "created": "now",
              "machine": {"vcpus": 2, "cpu": "AMD EPYC", "memory_gib": 24}, "software": {}, "git": {}, "command": "tsvk bench",
              "systems": {"ours": {"label": "tsvk (ours)", "throughput_ips": 10.0}},
              "compute": {"gflop_per_image": 8.0, "fp32_peak": {"gflops": 160.0, "formula": "f"}}}
    text = render_markdown(refresh(result))
    assert "## Compute use" in text and "| tsvk (ours) | 80.0 | 50% |" in text


@pytest.mark.parametrize("model, extra", [("resnet18", {"precision": "int8", "backend": "openvino"}),
                                          ("fasterrcnn_mobilenet_v3_large_320_fpn", {})])
def test_int8_and_detector_bench_archives_are_built_from_the_same_random_weights(tmp_path, model, extra):
    """Those archives rebuild the shared random weights from their seed: int8 from a file would count as
    trained, and a detector's random weights tie its scores, so its boxes cannot decide verification."""
    import torch

    from tsvk_tools.lab.bench.assets import WEIGHTS_SEED, ours_build_request, shared_weights
    from tsvk_tools.lab.bench.options import BenchOptions
    from tsvk_tools.archive.models import resolve_model

    options = BenchOptions(model=model, cache_dir=tmp_path, **extra)
    request = ours_build_request(options, shared_weights(options))
    assert request.weights == "none"
    torch.manual_seed(WEIGHTS_SEED)
    rebuilt = resolve_model(model, request.weights).model.state_dict()
    saved = torch.load(shared_weights(options), weights_only=True)
    assert rebuilt.keys() == saved.keys() and all(torch.equal(rebuilt[k], saved[k]) for k in saved)
