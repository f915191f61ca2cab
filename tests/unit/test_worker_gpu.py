"""A worker TorchServe puts on GPU 1 of a two-GPU machine does all its CUDA work there.

TorchServe 0.12 passes `gpu_id` without setting CUDA_VISIBLE_DEVICES, so the worker must make its
GPU the current device itself, before anything allocates on "the current device". `FakeCuda`
(tests/support/fake_cuda.py) keeps torch.cuda's device bookkeeping for two GPUs on this CPU machine.
"""

from types import SimpleNamespace

import pytest
import torch
import torchvision.io

from tsvk.common import features
from tsvk.worker import service
from tsvk.model.loading import ArtifactLoadError, LoadedModel
from tsvk.preprocess import BackendChoice
from tsvk.preprocess.cpu import CpuPreprocessor
from tsvk.worker.service import VisionService

from tests.support.handler_fakes import FakeContext, tiny_module, write_tiny_eager_archive


@pytest.fixture
def gpu_decodes(monkeypatch, cuda):
    """torchvision 0.29 `torchvision/io/image.py` `decode_jpeg(input, mode, device)` on a fake GPU: a "cuda"
    device without an index means the current one; records the device each decode would run on."""
    devices = []

    def decode_jpeg(data, mode=None, device="cpu", **_):
        device = torch.device(device)
        devices.append(torch.device("cuda", cuda.index(device)) if device.type == "cuda" else device)
        return SimpleNamespace(is_cuda=device.type == "cuda")

    monkeypatch.setattr(torchvision.io, "decode_jpeg", decode_jpeg)
    return devices


def _fake_loading(monkeypatch, cuda, model_dir):
    """The model load and the preprocessor build, recording the current device when each happens."""
    def load_model(artifact, directory, worker, num_classes=None, task="classify"):
        cuda.record("load_model")
        model = tiny_module(model_dir).TinyNet(num_classes or 10).eval()
        return LoadedModel(model, worker, torch.float32, artifact.format)

    def build_preprocessor(settings, device, dtype=torch.float32):
        cuda.record("build_preprocessor")
        return CpuPreprocessor(settings), BackendChoice("cpu", "test")

    monkeypatch.setattr(service, "load_model", load_model)
    monkeypatch.setattr(service, "build_preprocessor", build_preprocessor)


def test_a_worker_on_gpu_1_makes_it_current_before_any_cuda_work(tmp_path, monkeypatch, cuda, gpu_decodes):
    config = write_tiny_eager_archive(tmp_path, preprocess={"resize": 40, "crop": 32, "backend": "auto"})
    _fake_loading(monkeypatch, cuda, tmp_path)
    loaded = VisionService.from_context(FakeContext(tmp_path, config, gpu_id=1))
    assert loaded.model.device == torch.device("cuda", 1)
    assert cuda.events == [("set_device", 1), ("load_model", 1), ("build_preprocessor", 1)]
    assert gpu_decodes == [torch.device("cuda", 1)]  # the nvJPEG probe of the load log line


def test_a_gpu_id_beyond_the_visible_gpus_fails_the_load_saying_why(tmp_path, monkeypatch, cuda):
    cuda.count = 1
    config = write_tiny_eager_archive(tmp_path)
    with pytest.raises(ArtifactLoadError, match=r"gpu_id 1 but this process sees 1 CUDA device\(s\).*number_of_gpu"):
        VisionService.from_context(FakeContext(tmp_path, config, gpu_id=1))


def test_nvjpeg_probe_runs_on_the_device_asked_about_once_per_device(cuda, gpu_decodes):
    assert features.has_nvjpeg(torch.device("cuda", 1)) and features.has_nvjpeg(torch.device("cuda", 1))
    assert features.has_nvjpeg(torch.device("cuda", 0))
    assert not features.has_nvjpeg(torch.device("cpu"))
    assert gpu_decodes == [torch.device("cuda", 1), torch.device("cuda", 0)]
