"""Every CUDA compile backend for real: builds, passes verification, and takes every batch 1..max_batch.

Skipped with a reason where there is no CUDA (TensorRT also without torch_tensorrt). The weights are
the session's seeded resnet18 (tests/conftest.py), whose top classes are well apart, so verification
tests the compiler, not a near tie.
"""

from __future__ import annotations

import pytest
import torch

from tsvk.common import features
from tsvk.model.loading import load_model
from tsvk.tasks.answers import first_tensor
from tsvk_tools.archive.build import BuildRequest, build

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: no GPU or no CUDA driver on this machine"),
]
needs_trt = pytest.mark.skipif(not features.has_torch_tensorrt(),
                               reason=f"needs torch_tensorrt: {features.unavailable_reason('torch_tensorrt')}")
MAX_BATCH = 4


@pytest.mark.parametrize("backend, precision", [
    ("aoti", "fp32"), ("aoti", "fp16"), ("export", "fp32"),
    pytest.param("tensorrt", "fp16", marks=needs_trt), pytest.param("tensorrt", "fp32", marks=needs_trt),
])
def test_cuda_backend_verifies_and_takes_every_batch(tmp_path, resnet18_weights, backend, precision, record_property):
    request = BuildRequest(model="resnet18", backend=backend, device="cuda", precision=precision,
                           weights=str(resnet18_weights), max_batch=MAX_BATCH)
    result = build(request, tmp_path)
    for key in ("max_abs_diff", "allowed_abs_diff", "top1_agreement"):
        record_property(key, getattr(result.report, key))
    assert result.report.passed, result.report.describe()
    assert result.settings.artifact.compute_capability == "{}.{}".format(*torch.cuda.get_device_capability())
    loaded = load_model(result.settings.artifact, result.artifact.parent, torch.device("cuda")).forward  # as a worker loads it
    dtype = torch.float16 if precision == "fp16" else torch.float32
    with torch.no_grad():
        for batch in range(1, MAX_BATCH + 1):
            x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=dtype)
            assert first_tensor(loaded(x)).shape == (batch, 1000)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs: loads on the last one an archive built on GPU 0")
def test_an_export_archive_built_on_gpu_0_loads_on_the_last_gpu_without_touching_gpu_0(tmp_path, resnet18_weights):
    request = BuildRequest(model="resnet18", backend="export", device="cuda", precision="fp32",
                           weights=str(resnet18_weights), max_batch=MAX_BATCH)
    result = build(request, tmp_path)
    last = torch.device("cuda", torch.cuda.device_count() - 1)
    torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated(0)
    try:
        torch.cuda.set_device(last)
        loaded = load_model(result.settings.artifact, result.artifact.parent, last).forward
        with torch.no_grad():
            assert first_tensor(loaded(torch.randn(2, 3, 224, 224, device=last))).device == last
        assert torch.cuda.memory_allocated(0) == before
    finally:
        torch.cuda.set_device(0)
