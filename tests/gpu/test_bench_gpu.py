"""The benchmark's GPU mode for real: every system of the table on CUDA with a small model.

Skipped with a reason where there is no CUDA. Our archive is AOTInductor fp16 on CUDA (TensorRT
when torch_tensorrt imports), served by our handler with GPU preprocessing; stock TorchServe finds
the GPU itself. Nothing is timed: it checks that each system ran on the GPU, answered and stopped.
"""

from __future__ import annotations

import shutil

import pytest
import torch

from tsvk_tools.lab.bench.harness import run_benchmark
from tsvk_tools.lab.bench.options import BenchOptions, gpu_backend

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: no GPU or no CUDA driver on this machine"),
    pytest.mark.skipif(shutil.which("java") is None, reason="TorchServe needs Java 17"),
]


def test_every_system_runs_on_the_gpu_and_stops(tmp_path):
    backend, note = gpu_backend()
    options = BenchOptions(model="mobilenet_v3_small", device="cuda", backend=backend, backend_note=note, precision="fp16",
                           jobs=16, concurrency=4, decentralized_jobs=2, ceiling_seconds=0.5, warmup=4,
                           images=("skimage:chelsea", "skimage:coffee"), cache_dir=tmp_path)
    result = run_benchmark(options, log=print)
    assert result["machine"]["device"] == "cuda" and result["machine"]["gpus"]
    for name, system in result["systems"].items():
        assert "error" not in system, f"{name}: {system.get('error')}"
        assert system["throughput_ips"] > 0 and system["leftover_processes"] == []
    assert result["systems"]["ceiling"]["details"]["device"].startswith("cuda")
    assert result["systems"]["ceiling"]["details"]["preprocess_backend"] in ("cvcuda", "cuda")
    assert result["systems"]["ours"]["details"]["plan"]["gpus"] >= 1
    assert result["ratios"]["ours_vs_torchserve_default"] > 0
