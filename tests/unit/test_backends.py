"""Every backend that runs on this CPU compiles, reloads and verifies; TensorRT up to its seam."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from tsvk.common import features
from tsvk.model.loading import load_model, load_tensorrt
from tsvk.common.settings import ArtifactSettings
from tsvk_tools.archive.backends import BACKENDS, CompileTarget, check_target, get_backend, prepare_model
from tsvk_tools.archive.build import BuildRequest, build
from tsvk_tools.errors import UsageError
from tsvk_tools.archive.models import CustomModel
from tsvk_tools.archive.verify import Tolerance, verify_artifact

from tests.support.fake_torch_tensorrt import FakeTorchTensorRT

FIXTURES = Path(__file__).parent.parent / "fixtures"
TINY = CustomModel(FIXTURES / "tiny_model.py", "TinyNet", resize=40, crop=32)


@pytest.mark.parametrize("backend", ["export", "torchscript", "eager"])
def test_cpu_backends_on_mobilenet(tmp_path, backend):
    result = build(BuildRequest(model="mobilenet_v3_small", backend=backend, weights="none", max_batch=4), tmp_path)
    assert result.artifact.is_file() and result.report.passed
    assert result.report.batch_sizes == (1, 4) and result.report.top1_agreement == 1.0
    assert result.settings.provenance["verification"]["passed"] is True


@pytest.mark.parametrize("backend", list(b for b in BACKENDS if b != "tensorrt"))
def test_every_cpu_backend_on_a_custom_model(tmp_path, backend):
    result = build(BuildRequest(model="tiny", backend=backend, weights="none", custom=TINY, max_batch=4), tmp_path)
    assert result.report.passed and result.settings.artifact.source.kind == "file"


def test_aoti_bf16_on_cpu(tmp_path):
    result = build(BuildRequest(model="tiny", backend="aoti", precision="bf16", weights="none", custom=TINY, max_batch=2), tmp_path)
    assert result.report.passed and result.settings.artifact.precision == "bf16"


def test_verification_failure_is_an_error(tmp_path):
    impossible = Tolerance(atol=0.0, rtol=0.0, min_top1=1.01)
    with pytest.raises(UsageError, match="verification FAIL.*no archive written"):
        build(BuildRequest(model="tiny", backend="export", weights="none", custom=TINY, tolerance=impossible), tmp_path)


@pytest.mark.parametrize("backend, device, precision, message", [
    ("aoti", "cpu", "fp16", "supported: --device cpu: --precision fp32|bf16|int8; --device cuda: --precision fp32|fp16|bf16"),
    ("tensorrt", "cpu", "fp32", "--backend tensorrt does not run on --device cpu"),
    ("tensorrt", "cuda", "bf16", "does not support --precision bf16"),
])
def test_unsupported_combinations_name_the_supported_ones(backend, device, precision, message):
    with pytest.raises(UsageError, match=message.replace("|", r"\|")):
        check_target(get_backend(backend), device, precision)


def test_unknown_backend():
    with pytest.raises(UsageError, match="--backend must be one of aoti, export, torchscript, tensorrt, eager"):
        get_backend("onnx")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_cuda_device_without_cuda(tmp_path):
    with pytest.raises(UsageError, match="--device cuda needs a CUDA device"):
        build(BuildRequest(model="tiny", backend="aoti", device="cuda", weights="none", custom=TINY), tmp_path)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_tensorrt_without_cuda_says_what_is_missing_and_writes_nothing(tmp_path):
    with pytest.raises(UsageError, match=r"--backend tensorrt needs a CUDA device .*nothing was written"):
        build(BuildRequest(model="tiny", backend="tensorrt", device="cuda", weights="none", custom=TINY), tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def fake_trt(monkeypatch):
    """The fake in sys.modules, and the feature probes forgotten before and after: an earlier probe of the
    real (driver-less) torch_tensorrt is cached, and the worker's loader asks the probe."""
    fake = FakeTorchTensorRT()
    monkeypatch.setitem(sys.modules, "torch_tensorrt", fake)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    features.reset_cache()
    yield fake
    monkeypatch.undo()
    features.reset_cache()


def _compile_tensorrt(tmp_path, precision="fp32", max_batch=4):
    target = CompileTarget(device="cpu", precision=precision, max_batch=max_batch, crop=32)  # cpu tensors: the fake runs here
    backend = get_backend("tensorrt")
    model = prepare_model(TinyNet_eager(), target)
    with torch.no_grad():
        backend.compile(model, target, tmp_path / backend.file_name)
    # the worker's own TensorRT loader (its device rule is bypassed: the fake's engines are CPU tensors)
    return load_tensorrt(tmp_path / backend.file_name, torch.device("cpu")), model, target


def test_tensorrt_archive_accepts_every_batch_it_was_built_for(tmp_path, fake_trt):
    """Torch-TensorRT's save re-exports at the example's batch unless it is given the Input ranges."""
    loaded, model, target = _compile_tensorrt(tmp_path, max_batch=4)
    with torch.no_grad():
        for batch in (1, 3, 4):
            x = torch.randn(batch, 3, 32, 32)
            assert torch.allclose(loaded(x), model(x), atol=1e-5)
        report = verify_artifact(loaded, model, target)
    assert report.passed and report.batch_sizes == (1, 4)
    assert isinstance(fake_trt.calls["save"]["inputs"][0], fake_trt.Input)


def test_a_tensorrt_archive_built_on_gpu_0_rebuilds_its_engine_on_the_workers_gpu(tmp_path, monkeypatch, fake_trt, cuda):
    """A worker on GPU 1 makes it current before loading; the engine then goes there, not to GPU 0."""
    _compile_tensorrt(tmp_path)  # built while GPU 0 is current
    settings = ArtifactSettings(file="model.ep", format="tensorrt", device="cuda", gpu="NVIDIA H100 80GB HBM3",
                                compute_capability="9.0")
    cuda.set_device(1)
    cuda.keep_cuda_tensors_on_cpu(monkeypatch)
    load_model(settings, tmp_path, torch.device("cuda", 1))
    assert [engine.device for engine in fake_trt.engines] == [0, 1]  # built on 0 (load back), served on 1


def test_the_tensorrt_fake_refuses_an_engine_for_another_architecture_as_runtime_cpp_does(tmp_path, fake_trt, cuda):
    _compile_tensorrt(tmp_path)
    cuda.architectures = {0: ("NVIDIA L4", (8, 9)), 1: ("NVIDIA L4", (8, 9))}
    with pytest.raises(RuntimeError, match="No compatible device was found for instantiating TensorRT engine"):
        fake_trt.load(str(tmp_path / "model.ep"))


def test_tensorrt_precision_is_carried_by_the_input_dtype(tmp_path, fake_trt):
    """The dynamo path ignores enabled_precisions: fp16 comes from the fp16 model and input."""
    loaded, model, _ = _compile_tensorrt(tmp_path, precision="fp16", max_batch=8)
    assert fake_trt.calls["compile"]["ir"] == "dynamo" and fake_trt.ignored == []
    spec = fake_trt.calls["compile"]["inputs"][0]
    assert spec.dtype == torch.float16
    assert spec.shape == {"min_shape": (1, 3, 32, 32), "opt_shape": (8, 3, 32, 32), "max_shape": (8, 3, 32, 32)}
    assert fake_trt.calls["save"]["output_format"] == "exported_program"
    x = torch.randn(1, 3, 32, 32, dtype=torch.float16)
    with torch.no_grad():
        assert torch.allclose(loaded(x), model(x))


def TinyNet_eager():
    from tsvk_tools.archive.models import build_from_file

    return build_from_file(FIXTURES / "tiny_model.py", "make_tiny").eval()
