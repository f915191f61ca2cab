"""The GPU mode of the benchmark up to its seam (no GPU here): what --gpu asks of each system, and
that a run asking for a GPU the machine lacks stops before building anything, saying so.
tests/gpu/test_bench_gpu.py runs the same systems for real where CUDA is present."""

from __future__ import annotations

import os

import pytest
import torch

from tsvk_tools.lab.bench import harness
from tsvk_tools.lab.bench.apps.ceiling_probe import device_sync, no_sync, timed_calls
from tsvk_tools.lab.bench.assets import Photo, ours_build_request
from tsvk_tools.lab.bench.markdown import render_markdown
from tsvk.common import features
from tsvk_tools.lab.bench.options import AS_SENT_SYSTEMS, FAST_SYSTEMS, GPU, SYSTEMS, BenchOptions, gpu_backend, require_device
from tsvk_tools.lab.bench.result_document import build_result
from tsvk_tools.lab.bench.bench_cli import build_parser, options_from_args
from tsvk_tools.lab.bench.systems.base import RunContext
from tsvk_tools.lab.bench.systems.ceiling import ComputeCeiling
from tsvk_tools.lab.bench.systems.decentralized import job_command
from tsvk_tools.lab.bench.systems.torchserve import TorchServeTuned, tuned_worker_counts
from tsvk_tools.errors import UsageError


def _options(*argv):
    return options_from_args(build_parser().parse_args(list(argv)), list(argv))


def _context(tmp_path, **options) -> RunContext:
    ctx = RunContext(BenchOptions(**options), vcpus=16, run_dir=tmp_path)
    photo = tmp_path / "0-chelsea.jpg"
    photo.write_bytes(b"jpeg")
    ctx.__dict__["photos"] = [Photo("chelsea", b"jpeg", photo)]  # the cached property, without encoding photos
    ctx.__dict__["ours_mar"] = tmp_path / "ours.mar"
    return ctx


@pytest.fixture
def tensorrt_imports(monkeypatch):
    """tensorrt_imports(True | False): whether torch_tensorrt imports, whatever this machine says."""
    def fake(importable: bool) -> None:
        monkeypatch.setattr(features, "has_torch_tensorrt", lambda: importable)
        monkeypatch.setattr(features, "unavailable_reason", lambda name: "" if importable else "OSError: libcuda.so.1")

    return fake


def test_gpu_flag_runs_every_system_on_cuda_in_fp16_with_its_own_tag(tensorrt_imports):
    tensorrt_imports(True)
    options = _options("--gpu")
    assert (options.device, options.precision, options.tag) == ("cuda", "fp16", "gpu")
    assert (options.jobs, options.concurrency, options.model) == (GPU.jobs, GPU.concurrency, "resnet152")
    assert (options.backend, options.backend_note) == ("tensorrt", "torch_tensorrt imports")
    # the CPU table but its CPU-artifact rows (and the rows for photos as sent)
    assert options.systems == tuple(s for s in SYSTEMS if s not in FAST_SYSTEMS + AS_SENT_SYSTEMS)
    assert FAST_SYSTEMS and set(FAST_SYSTEMS) < set(SYSTEMS)


def test_fast_rows_cannot_be_asked_for_in_the_gpu_mode(tensorrt_imports):
    tensorrt_imports(True)
    with pytest.raises(UsageError, match="ours_fast measure the fastest CPU artifact and cannot run in the GPU mode"):
        _options("--gpu", "--systems", "ours,ours_fast")


def test_gpu_backend_is_tensorrt_only_where_it_imports(tensorrt_imports):
    tensorrt_imports(True)
    assert gpu_backend() == ("tensorrt", "torch_tensorrt imports")
    tensorrt_imports(False)
    backend, note = gpu_backend()
    assert backend == "aoti"
    assert note == "torch_tensorrt is not usable here (OSError: libcuda.so.1), so AOTInductor on CUDA"


def test_gpu_flag_keeps_a_named_backend_and_precision_and_combines_with_quick():
    options = _options("--gpu", "--quick", "--backend", "aoti", "--precision", "bf16")
    assert (options.backend, options.precision, options.backend_note) == ("aoti", "bf16", "as asked")
    assert options.tag == "gpu-quick" and options.model == "resnet18"


def test_cpu_runs_stay_fp32_on_the_cpu():
    options = _options("--quick")
    assert (options.device, options.precision, options.backend, options.tag) == ("cpu", "fp32", "aoti", "quick")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"backend": "tensorrt"}, "backend tensorrt does not run on device cpu; it runs on cuda"),
    ({"precision": "fp16"}, "backend aoti on cpu supports precision fp32, bf16, int8, got 'fp16'"),
    ({"device": "tpu"}, "device must be one of cpu, cuda, got 'tpu'"),
    ({"device": "cuda", "backend": "tensorrt", "precision": "bf16"}, "backend tensorrt on cuda supports precision fp32, fp16"),
])
def test_impossible_targets_are_refused_with_what_is_allowed(kwargs, message):
    with pytest.raises(UsageError, match=message):
        BenchOptions(**kwargs)


def test_asking_for_a_gpu_without_one_fails_before_any_build(monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    options = BenchOptions(device="cuda", precision="fp16", cache_dir=tmp_path)
    with pytest.raises(UsageError, match=r"needs a CUDA GPU.*run without --gpu"):
        require_device(options)
    with pytest.raises(UsageError, match="needs a CUDA GPU"):
        harness.prepare(options, log=lambda _: None)
    assert list(tmp_path.iterdir()) == []  # no weights, no archive, no photos
    require_device(BenchOptions())  # a CPU run needs nothing


def test_our_archive_is_built_for_the_runs_device_and_precision(tmp_path):
    request = ours_build_request(BenchOptions(device="cuda", backend="tensorrt", precision="fp16", batch=4), tmp_path / "w.pt")
    assert (request.device, request.backend, request.precision, request.serving.batch_size) == ("cuda", "tensorrt", "fp16", 4)


def test_each_process_is_told_the_device(tmp_path):
    ctx = _context(tmp_path, device="cuda", precision="fp16")
    assert job_command(ctx, 0)[-2:] == ["--device", "cuda"]
    assert job_command(_context(tmp_path), 0)[-2:] == ["--device", "cpu"]


class _ProbeStarted(Exception):
    """Raised where the ceiling would start its child process (the part that needs the GPU)."""


def test_ceiling_probe_runs_on_the_runs_device(tmp_path, monkeypatch):
    seen = {}

    def fake_run(command, **kwargs):
        seen["command"] = command
        raise _ProbeStarted

    monkeypatch.setattr("subprocess.run", fake_run)
    with pytest.raises(_ProbeStarted):
        ComputeCeiling().run(_context(tmp_path, device="cuda", precision="fp16"), {})
    command = seen["command"]
    assert command[command.index("--device") + 1] == "cuda"


def test_hand_tuned_stock_tries_few_workers_on_a_gpu_and_every_count_on_a_cpu(tmp_path):
    assert tuned_worker_counts(16, "cuda") == [1, 2, 4]
    assert tuned_worker_counts(2, "cuda") == [1, 2]
    assert tuned_worker_counts(3, "cpu") == [1, 2, 3]
    variants = TorchServeTuned().variants(_context(tmp_path, device="cuda", precision="fp16"))
    assert variants == [{"workers": 1, "threads": 16}, {"workers": 2, "threads": 8}, {"workers": 4, "threads": 4}]


def test_a_cpu_run_hides_the_gpus_from_every_system_and_gives_them_back(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    before = harness._hide_gpus_unless_asked("cpu")
    assert os.environ["CUDA_VISIBLE_DEVICES"] == ""
    harness._restore(before)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0,1"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    harness._restore(harness._hide_gpus_unless_asked("cuda"))
    assert "CUDA_VISIBLE_DEVICES" not in os.environ


def test_gpu_timings_wait_for_the_device():
    assert device_sync(torch.device("cpu")) is no_sync
    assert device_sync(torch.device("cuda")) is torch.cuda.synchronize
    waits = []
    timed_calls(lambda: None, seconds=0.0, min_calls=4, sync=lambda: waits.append(1))
    assert len(waits) == 4


def test_gpu_report_names_the_device_the_backend_and_why(monkeypatch):
    from datetime import datetime, timezone

    monkeypatch.setattr("tsvk_tools.lab.bench.result_document.gpu_names", lambda: ["NVIDIA H100 80GB HBM3"])
    options = BenchOptions(device="cuda", backend="aoti", precision="fp16", backend_note="torch_tensorrt is not usable here (x)",
                           systems=("ours",), command="tsvk bench --gpu")
    ours = {"label": "tsvk (ours)", "throughput_ips": 900.0, "latency_ms": {"p50": 50.0, "p95": 60.0, "p99": 70.0},
            "details": {"plan": {"workers": 1, "threads": 16, "batch": 8, "backend": "aoti", "precision": "fp16"}}}
    when = datetime(2026, 11, 23, tzinfo=timezone.utc)
    result = build_result(options, 16, {"ours": ours}, when, when)
    assert result["machine"]["gpus"] == ["NVIDIA H100 80GB HBM3"] and result["machine"]["device"] == "cuda"
    markdown = render_markdown(result)
    assert "# Benchmark: resnet152 on the GPU (aoti fp16; torch_tensorrt is not usable here (x))" in markdown
    assert "GPU: NVIDIA H100 80GB HBM3" in markdown
    assert "| tsvk (ours) (1 worker(s) x 16 thread(s), batch 8, aoti fp16) |" in markdown


def test_on_a_gpu_the_diagnosis_does_not_split_decode_from_transform_with_cpu_timings():
    from tsvk_tools.lab.bench.diagnosis import explain

    ceiling = {"throughput_ips": 2000.0, "details": {"device": "cuda:0", "preprocess_backend": "cvcuda",
                                                      "decode_images_per_s": 700.0, "preprocess_images_per_s": 3000.0}}
    lines = explain({"ceiling": ceiling})
    assert lines == ["in-process, the cvcuda backend decodes and preprocesses 3000 img/s (CPU decoding alone: 700 img/s), "
                     "against 0.50 ms of model per image at the best batch."]
