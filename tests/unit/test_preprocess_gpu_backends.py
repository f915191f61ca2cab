"""The cuda and cvcuda backends up to their GPU seams, on the CPU.

`cvcuda` is replaced by a narrow fake that implements the five calls the backend makes with torch
ops, so the test checks the backend's arithmetic (rects, normalization constants, layout) against
the CPU backend and records the calls it makes. nvJPEG is replaced by CPU decode.
"""

from types import SimpleNamespace

import pytest
import torch
import torchvision.transforms.v2.functional as F

from tsvk import features
from tsvk.decode import decode_rgb, probe
from tsvk.preprocess import torch_cuda
from tsvk.preprocess.cpu import CpuPreprocessor
from tsvk.preprocess.cv_cuda import CvCudaPreprocessor
from tsvk.settings import PreprocessSettings

from tests.support.handler_fakes import encode, noise_image, photo

torch.set_num_threads(1)
LIMIT = 50_000_000
CPU = torch.device("cpu")


class _FakeCvTensor:
    def __init__(self, tensor, layout=None):
        self.tensor, self.layout = tensor, layout

    def cuda(self):
        return self.tensor


class FakeCvcuda:
    """Implements as_images, as_tensor, tvresize, crop_flip_normalize_reformat with torch, and logs calls."""

    Format = SimpleNamespace(RGB8="RGB8")
    Type = SimpleNamespace(F32="F32")
    Interp = SimpleNamespace(LINEAR="LINEAR", CUBIC="CUBIC", NEAREST_FLOOR="NEAREST_FLOOR")
    TensorLayout = staticmethod(lambda name: f"layout:{name}")

    def __init__(self):
        self.calls = []

    def as_tensor(self, tensor, layout=None):
        return _FakeCvTensor(tensor, layout)

    def as_images(self, images, fmt):
        assert all(image.ndim == 3 and image.shape[2] == 3 and image.is_contiguous() for image in images), "HWC interleaved"
        self.calls.append(("as_images", len(images), fmt))
        return [image.permute(2, 0, 1) for image in images]

    def tvresize(self, batch, size, interp, antialias, stream=None):
        self.calls.append(("tvresize", size, interp, antialias))
        return [F.resize(image, size, antialias=antialias) for image in batch]

    def crop_flip_normalize_reformat(self, batch, out_shape, dtype, layout, rect, flip, base, scale, stream=None):
        self.calls.append(("cfnr", out_shape, dtype, layout, flip.tensor.tolist()))
        mean = base.tensor.view(3, 1, 1)
        factor = scale.tensor.view(3, 1, 1)
        crops = []
        for image, (x, y, w, h) in zip(batch, rect.tensor.view(-1, 4).tolist()):
            crops.append((image[:, y : y + h, x : x + w].float() - mean) * factor)
        out = torch.stack(crops)
        assert tuple(out.shape) == out_shape
        return _FakeCvTensor(out)


@pytest.fixture
def fake_cvcuda(monkeypatch):
    fake = FakeCvcuda()
    monkeypatch.setattr(features, "optional_module", lambda name: fake if name == "cvcuda" else pytest.fail(name))
    return fake


def _images():
    payloads = [encode(photo("chelsea", (640, 480)), "JPEG"), encode(photo("coffee"), "PNG"), encode(photo("astronaut", (300, 500)), "JPEG")]
    return [probe(p, LIMIT) for p in payloads]


def test_cvcuda_backend_matches_cpu_backend_within_one_level(fake_cvcuda):
    settings = PreprocessSettings(resize=232, crop=224)
    ours = CvCudaPreprocessor(settings, CPU)(_images())
    reference = CpuPreprocessor(settings)(_images())
    assert ours.kept == reference.kept == [0, 1, 2]
    assert ours.batch.shape == (3, 3, 224, 224) and ours.batch.dtype == torch.float32
    assert (ours.batch - reference.batch).abs().max().item() < 1e-4


def test_cvcuda_backend_makes_one_call_per_step_for_the_whole_batch(fake_cvcuda):
    CvCudaPreprocessor(PreprocessSettings(resize=232, crop=224), CPU)(_images())
    names = [call[0] for call in fake_cvcuda.calls]
    assert names == ["as_images", "tvresize", "cfnr"]
    assert fake_cvcuda.calls[1] == ("tvresize", [232], "LINEAR", True)
    assert fake_cvcuda.calls[2][1:4] == ((3, 3, 224, 224), "F32", "layout:NCHW")
    assert set(fake_cvcuda.calls[2][4]) == {2}  # no flip


def test_cvcuda_backend_casts_to_the_artifact_precision(fake_cvcuda):
    out = CvCudaPreprocessor(PreprocessSettings(resize=64, crop=56), CPU, torch.float16)(_images()[:1])
    assert out.batch.dtype == torch.float16


def test_cvcuda_backend_without_cvcuda_says_how_to_install(monkeypatch):
    features.reset_cache()
    monkeypatch.setattr(features, "_probe_module", lambda name: (None, "ImportError: libcuda.so.1"))
    with pytest.raises(ImportError, match="libcuda.so.1.*pip install cvcuda"):
        CvCudaPreprocessor(PreprocessSettings(), CPU)


def test_gpu_decode_batches_jpegs_and_retries_alone_when_one_is_corrupt(monkeypatch):
    calls = []

    def fake_nvjpeg(payloads, device):
        calls.append(len(payloads))
        return [decode_rgb(probe(p, LIMIT)) for p in payloads]

    monkeypatch.setattr(torch_cuda, "nvjpeg_decode", fake_nvjpeg)
    good = encode(noise_image(64, 48), "JPEG")
    bad = encode(noise_image(200, 150), "JPEG")
    images = [probe(good, LIMIT), probe(bad[: len(bad) // 2], LIMIT), probe(encode(noise_image(), "PNG"), LIMIT)]
    decoded, failed = torch_cuda.decode_on_gpu(images, CPU, nvjpeg=True)
    assert calls[0] == 2  # both JPEGs in one batched call first
    assert sorted(decoded) == [0, 2] and list(failed) == [1] and failed[1].status == 400


def test_gpu_decode_applies_exif_orientation_that_nvjpeg_ignores(monkeypatch):
    from PIL import Image

    monkeypatch.setattr(torch_cuda, "nvjpeg_decode", lambda payloads, device: [torch.zeros(3, 20, 40, dtype=torch.uint8)])
    exif = Image.Exif()
    exif[0x0112] = 6
    image = probe(encode(Image.new("RGB", (40, 20)), "JPEG", exif=exif), LIMIT)
    decoded, _ = torch_cuda.decode_on_gpu([image], CPU, nvjpeg=True)
    assert tuple(decoded[0].shape) == (3, 40, 20)


def test_cuda_backend_matches_cpu_backend(monkeypatch):
    """The cuda backend's tensor path on CPU tensors (nvJPEG off) equals the CPU backend exactly."""
    monkeypatch.setattr(features, "has_nvjpeg", lambda: False)
    settings = PreprocessSettings(resize=232, crop=224)
    ours = torch_cuda.CudaPreprocessor(settings, CPU)(_images())
    assert torch.equal(ours.batch, CpuPreprocessor(settings)(_images()).batch)
