"""GPU backends for real: nvJPEG + torch ops (`cuda`) and CV-CUDA (`cvcuda`) against the CPU backend.

Skipped with a reason where there is no CUDA (or no cvcuda for the CV-CUDA tests). Tolerance between
backends (docs/handler.md): nvJPEG and libjpeg-turbo may round IDCT and chroma upsampling
differently, and GPU resize runs in float; so a pixel may differ by some uint8 levels. The bound is
torchvision's own for its CUDA decoder against the CPU one (`test/test_image.py`, `test_decode_jpegs_cuda`:
mean absolute difference under 2 levels); the largest difference is recorded, not bounded. A classifier
with seeded decisive weights (tests/conftest.py) must pick the same class for every image, and its
top-5 sets must overlap in at least 4: its lower classes may still lie close enough to swap.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.support.handler_fakes import FakeContext, encode, photo, write_tiny_eager_archive
from tsvk.common import features
from tsvk.preprocess.decode import probe
from tsvk.preprocess.cpu import CpuPreprocessor
from tsvk.common.settings import PreprocessSettings

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: no GPU or no CUDA driver on this machine"),
]
needs_cvcuda = pytest.mark.skipif(not features.has_cvcuda(), reason=f"needs cvcuda: {features.unavailable_reason('cvcuda') or 'no CUDA'}")

ONE_LEVEL = 1.0 / (255 * 0.224)
MEAN_LEVELS = 2  # averaged over the batch, as torchvision bounds its CUDA decoder
TOP5_OVERLAP = 4
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


def _assert_close_to_cpu(batch: torch.Tensor, weights, record_property):
    """Within the documented bounds; the measured levels go to the JUnit XML (`make gpu-check` reports them)."""
    from torchvision.models import resnet18

    reference = CpuPreprocessor(SETTINGS)(_images()).batch
    difference = (batch.float().cpu() - reference).abs()
    record_property("max_levels", round(difference.max().item() / ONE_LEVEL, 3))
    record_property("mean_levels", round(difference.mean().item() / ONE_LEVEL, 4))
    assert difference.mean().item() < MEAN_LEVELS * ONE_LEVEL
    model = resnet18()
    model.load_state_dict(torch.load(weights))
    with torch.inference_mode():
        ours, theirs = model.eval()(batch.float().cpu()).topk(5).indices, model(reference).topk(5).indices
    assert torch.equal(ours[:, 0], theirs[:, 0])
    assert all(len(set(a.tolist()) & set(b.tolist())) >= TOP5_OVERLAP for a, b in zip(ours, theirs))


def test_nvjpeg_is_available_with_cuda():
    assert features.has_nvjpeg(), "torchvision cannot decode JPEG on this GPU"


def test_cuda_backend_matches_cpu_within_tolerance(resnet18_weights, record_property):
    from tsvk.preprocess.torch_cuda import CudaPreprocessor

    result = CudaPreprocessor(SETTINGS, GPU)(_images())
    assert result.batch.is_cuda and result.kept == [0, 1, 2, 3]
    _assert_close_to_cpu(result.batch, resnet18_weights, record_property)


@needs_cvcuda
def test_cvcuda_backend_matches_cpu_within_tolerance(resnet18_weights, record_property):
    from tsvk.preprocess.cv_cuda import CvCudaPreprocessor

    result = CvCudaPreprocessor(SETTINGS, GPU)(_images())
    assert result.batch.is_cuda and result.batch.shape == (4, 3, 224, 224)
    _assert_close_to_cpu(result.batch, resnet18_weights, record_property)


@needs_cvcuda
def test_cvcuda_cache_stays_within_its_limit_over_many_batch_shapes(record_property):
    """Each mix of photo sizes gives tvresize outputs of new shapes; the cache must not grow past its limit."""
    from tsvk.preprocess.cv_cuda import CvCudaPreprocessor

    cvcuda = features.optional_module("cvcuda")
    backend = CvCudaPreprocessor(SETTINGS, GPU)
    for width in range(300, 700, 20):
        backend([probe(encode(photo("coffee", (width, 480)), "JPEG"), SETTINGS.max_pixels)] * 4)
    record_property("cvcuda_cache_after_20_shapes_mib", round(cvcuda.current_cache_size_inbytes() / 2**20, 1))
    assert cvcuda.get_cache_limit_inbytes() == SETTINGS.cvcuda_cache_mb * 2**20
    assert cvcuda.current_cache_size_inbytes() <= SETTINGS.cvcuda_cache_mb * 2**20


def test_a_jpeg_nvjpeg_refuses_is_decoded_on_the_cpu():
    """An arithmetic-coded JPEG and one with a chroma subsampling nvJPEG has no name for: 200 on the CPU backend."""
    from tsvk.preprocess.torch_cuda import decode_on_gpu

    fixtures = Path(__file__).resolve().parents[1] / "fixtures"
    images = [probe((fixtures / name).read_bytes(), SETTINGS.max_pixels)
              for name in ("jpeg_arithmetic.jpg", "jpeg_chroma_2x2_2x1_1x1.jpg")]
    decoded, failed = decode_on_gpu(images, GPU)
    assert failed == {} and sorted(decoded) == [0, 1] and all(t.is_cuda for t in decoded.values())


def _backend(name: str):
    from tsvk.preprocess.cv_cuda import CvCudaPreprocessor
    from tsvk.preprocess.torch_cuda import CudaPreprocessor

    return {"cuda": CudaPreprocessor, "cvcuda": CvCudaPreprocessor}[name]


@pytest.mark.parametrize("backend", ["cuda", pytest.param("cvcuda", marks=needs_cvcuda)])
def test_truncated_jpeg_in_a_gpu_batch_fails_alone_with_400(backend):
    good = encode(photo("chelsea", (640, 480)), "JPEG")
    images = [probe(good, SETTINGS.max_pixels), probe(good[: len(good) // 2], SETTINGS.max_pixels), probe(good, SETTINGS.max_pixels)]
    result = _backend(backend)(SETTINGS, GPU)(images)
    assert result.kept == [0, 2] and list(result.failed) == [1] and result.failed[1].status == 400


@needs_cvcuda
@pytest.mark.parametrize("resize, crop", [(342, 299), (320, 300), (518, 518)])
def test_cvcuda_batch_is_contiguous_for_crops_nvcv_would_pad(resize, crop):
    """NVCV pads rows to 32 bytes; AOTInductor would misread a strided batch without an error."""
    settings = PreprocessSettings(resize=resize, crop=crop)
    result = _backend("cvcuda")(settings, GPU)(_images())
    assert result.batch.is_contiguous() and result.batch.shape == (4, 3, crop, crop)
    reference = CpuPreprocessor(settings)(_images()).batch
    assert (result.batch.cpu() - reference).abs().mean().item() < MEAN_LEVELS * ONE_LEVEL


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs: checks a worker on the last one")
def test_a_worker_on_the_last_gpu_does_its_cuda_work_there(tmp_path):
    from tsvk.worker.service import VisionService

    last = torch.cuda.device_count() - 1
    config = write_tiny_eager_archive(tmp_path, preprocess={"resize": 40, "crop": 32, "backend": "auto"})
    context = FakeContext(tmp_path, config, gpu_id=last)
    before = torch.cuda.memory_allocated(0)
    try:
        service = VisionService.from_context(context)
        answers = service.handle([{"data": encode(photo("coffee"), "JPEG")}], context)
        assert torch.cuda.current_device() == last and service.model.device == torch.device("cuda", last)
        assert len(answers[0]) == 3 and torch.cuda.memory_allocated(0) == before
    finally:
        torch.cuda.set_device(0)


def test_handler_on_a_gpu_worker_uses_the_gpu(tmp_path):
    config = write_tiny_eager_archive(tmp_path, preprocess={"resize": 40, "crop": 32, "backend": "auto"})
    context = FakeContext(tmp_path, config, gpu_id=0)
    from tsvk.worker.service import VisionService

    service = VisionService.from_context(context)
    assert service.model.device.type == "cuda"
    assert service.preprocessor.name == ("cvcuda" if features.has_cvcuda() else "cuda")
    answers = service.handle([{"data": encode(photo("coffee"), "JPEG")}, {"data": b"junk"}], context)
    assert len(answers[0]) == 3 and context.statuses[1][0] == 400
