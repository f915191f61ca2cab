"""GPU backends for real: nvJPEG + torch ops (`cuda`) and CV-CUDA (`cvcuda`) against the CPU backend.

Skipped with a reason where there is no CUDA (or no cvcuda for the CV-CUDA tests). Tolerance between
backends (docs/handler.md): nvJPEG and libjpeg-turbo may round IDCT and chroma upsampling
differently, and GPU resize runs in float; so a pixel may differ by a few uint8 levels, while the
average stays under half a level and a classifier ranks the same classes.
"""

from __future__ import annotations

import pytest
import torch

from tests.support.handler_fakes import FakeContext, encode, photo, write_tiny_eager_archive
from tsvk import features
from tsvk.decode import probe
from tsvk.preprocess.cpu import CpuPreprocessor
from tsvk.settings import PreprocessSettings

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: no GPU or no CUDA driver on this machine"),
]
needs_cvcuda = pytest.mark.skipif(not features.has_cvcuda(), reason=f"needs cvcuda: {features.unavailable_reason('cvcuda') or 'no CUDA'}")

ONE_LEVEL = 1.0 / (255 * 0.224)
MAX_LEVELS = 6  # any single value
MEAN_LEVELS = 0.5  # averaged over the batch
SETTINGS = PreprocessSettings(resize=232, crop=224)
GPU = torch.device("cuda", 0)


def _images():
    payloads = [
        encode(photo("chelsea", (640, 480)), "JPEG", quality=90),
        encode(photo("coffee"), "JPEG", quality=90),
        encode(photo("astronaut", (480, 640)), "JPEG", quality=90),
        encode(photo("rocket"), "PNG"),  # not JPEG: CPU decode, GPU transforms
    ]
    return [probe(p, SETTINGS.max_pixels) for p in payloads]


def _assert_close_to_cpu(batch: torch.Tensor):
    reference = CpuPreprocessor(SETTINGS)(_images()).batch
    difference = (batch.float().cpu() - reference).abs()
    assert difference.max().item() <= MAX_LEVELS * ONE_LEVEL
    assert difference.mean().item() <= MEAN_LEVELS * ONE_LEVEL
    torch.manual_seed(0)
    from torchvision.models import resnet18

    model = resnet18(num_classes=1000).eval()
    with torch.inference_mode():
        assert torch.equal(model(batch.float().cpu()).topk(5).indices, model(reference).topk(5).indices)


def test_nvjpeg_is_available_with_cuda():
    assert features.has_nvjpeg(), "torchvision cannot decode JPEG on this GPU"


def test_cuda_backend_matches_cpu_within_tolerance():
    from tsvk.preprocess.torch_cuda import CudaPreprocessor

    result = CudaPreprocessor(SETTINGS, GPU)(_images())
    assert result.batch.is_cuda and result.kept == [0, 1, 2, 3]
    _assert_close_to_cpu(result.batch)


@needs_cvcuda
def test_cvcuda_backend_matches_cpu_within_tolerance():
    from tsvk.preprocess.cv_cuda import CvCudaPreprocessor

    result = CvCudaPreprocessor(SETTINGS, GPU)(_images())
    assert result.batch.is_cuda and result.batch.shape == (4, 3, 224, 224)
    _assert_close_to_cpu(result.batch)


def test_corrupt_jpeg_in_a_gpu_batch_fails_alone():
    from tsvk.preprocess.torch_cuda import CudaPreprocessor

    good = encode(photo("chelsea", (640, 480)), "JPEG")
    images = [probe(good, SETTINGS.max_pixels), probe(good[: len(good) // 2], SETTINGS.max_pixels), probe(good, SETTINGS.max_pixels)]
    result = CudaPreprocessor(SETTINGS, GPU)(images)
    assert result.kept == [0, 2] and list(result.failed) == [1]


def test_handler_on_a_gpu_worker_uses_the_gpu(tmp_path):
    config = write_tiny_eager_archive(tmp_path, preprocess={"resize": 40, "crop": 32, "backend": "auto"})
    context = FakeContext(tmp_path, config, gpu_id=0)
    from tsvk.service import ClassifierService

    service = ClassifierService.from_context(context)
    assert service.model.device.type == "cuda"
    assert service.preprocessor.name == ("cvcuda" if features.has_cvcuda() else "cuda")
    answers = service.handle([{"data": encode(photo("coffee"), "JPEG")}, {"data": b"junk"}], context)
    assert len(answers[0]) == 3 and context.statuses[1][0] == 400
