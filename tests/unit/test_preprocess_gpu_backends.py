"""The cuda and cvcuda backends up to their GPU seams, on the CPU.

`cvcuda` is replaced by a fake that behaves like CV-CUDA 0.19 where it matters (tests/support/fake_cvcuda.py:
buffers only through the CUDA Array Interface, legacy-stream waits recorded, rows padded like NVCV,
outputs on the current device), so the tests check the backend's arithmetic (rects, normalization
constants, layout) against the CPU backend and how it hands tensors over. nvJPEG is faked where torchvision
calls it, `torch.ops.image.decode_jpegs_cuda` (tests/support/fake_nvjpeg.py), so the decode path of ours
(batching, retries, the CPU fallback, stream synchronization) runs as it would on a GPU.
"""

from pathlib import Path


import pytest
import torch

from tsvk.common import features
from tsvk.preprocess.decode import decode_rgb, probe
from tsvk.preprocess import cv_cuda, torch_cuda
from tsvk.preprocess.cpu import CpuPreprocessor
from tsvk.preprocess.cv_cuda import CvCudaPreprocessor
from tsvk.common.settings import PreprocessSettings

from tests.support.fake_cuda import FakeStream, SimulatedDeviceMemory
from tests.support.fake_cvcuda import FakeCvcuda, FakeCvTensor
from tests.support.fake_nvjpeg import FakeNvjpeg
from tests.support.handler_fakes import encode, noise_image, photo

torch.set_num_threads(1)
LIMIT = 50_000_000
CPU = torch.device("cpu")


@pytest.fixture
def fake_cvcuda(monkeypatch, cuda):
    """CV-CUDA 0.19 as tests/support/fake_cvcuda.py imitates it, over CPU memory standing in for the GPU's."""
    fake = FakeCvcuda(cuda, SimulatedDeviceMemory().install(monkeypatch))
    monkeypatch.setattr(cv_cuda, "_cache_limited", set())
    monkeypatch.setattr(features, "optional_module", lambda name: fake if name == "cvcuda" else pytest.fail(name))
    return fake


def _images():
    payloads = [
        encode(photo("chelsea", (640, 480)), "JPEG"),
        encode(photo("coffee"), "PNG"),
        encode(photo("astronaut", (300, 500)), "JPEG"),
    ]
    return [probe(p, LIMIT) for p in payloads]


def pixel_levels(ours: torch.Tensor, reference: torch.Tensor, settings: PreprocessSettings) -> torch.Tensor:
    """|ours - reference| of two normalized batches in 0..255 pixel levels."""
    return (ours - reference).abs() * 255 * torch.tensor(settings.std).view(1, 3, 1, 1)


def test_cvcuda_backend_matches_cpu_backend_within_one_level(fake_cvcuda):
    settings = PreprocessSettings(resize=232, crop=224)
    ours = CvCudaPreprocessor(settings, CPU)(_images())
    reference = CpuPreprocessor(settings)(_images())
    assert ours.kept == reference.kept == [0, 1, 2]
    assert ours.batch.shape == (3, 3, 224, 224) and ours.batch.dtype == torch.float32
    levels = pixel_levels(ours.batch, reference.batch, settings)
    assert levels.max().item() <= 1.001 and levels.mean().item() < 0.2


def test_cvcuda_resize_uses_the_interpolation_the_weights_ask_for(fake_cvcuda):
    settings = PreprocessSettings(resize=232, crop=224, interpolation="bicubic")
    ours = CvCudaPreprocessor(settings, CPU)(_images())
    assert fake_cvcuda.calls[1] == ("tvresize", [232], "CUBIC", True)
    # bicubic overshoots and is clamped at a different step in float than in torchvision's uint8 kernel
    assert pixel_levels(ours.batch, CpuPreprocessor(settings)(_images()).batch, settings).mean().item() < 2


def test_cvcuda_cache_is_limited_once_per_process_to_the_setting(fake_cvcuda, monkeypatch):
    """CV-CUDA's own limit is half the GPU per process: two workers on one GPU could take all of it."""
    monkeypatch.setattr(cv_cuda, "_cache_limited", set())
    assert fake_cvcuda.get_cache_limit_inbytes() == 40 * 2**30
    for _ in range(2):
        CvCudaPreprocessor(PreprocessSettings(resize=64, crop=56, cvcuda_cache_mb=128), CPU)(_images())
    assert fake_cvcuda.cache_limit_calls == [128 * 2**20]
    assert 0 < fake_cvcuda.current_cache_size_inbytes() <= 128 * 2**20


@pytest.mark.parametrize(
    "shape, dtype, layout", [((3, 4), torch.int32, "NHWC"), ((3, 1, 1, 4), torch.int64, "NHWC"), ((3, 1, 1, 4), torch.int32, "NCHW")]
)
def test_fake_cvcuda_refuses_rects_other_than_int32_n_1_1_4_nhwc(cuda, shape, dtype, layout):
    """The fake itself: crop_flip_normalize_reformat_into's arguments as CV-CUDA 0.19's docstring states them."""
    fake = FakeCvcuda(cuda, SimulatedDeviceMemory())
    wrap = FakeCvTensor
    images = [torch.zeros(3, 8, 8, dtype=torch.uint8)] * 3
    with pytest.raises(ValueError, match="rect must be torch.int32"):
        fake.crop_flip_normalize_reformat_into(
            wrap(torch.empty(3, 3, 4, 4), "NCHW"),
            images,
            wrap(torch.zeros(shape, dtype=dtype), layout),
            wrap(torch.full((3,), 2, dtype=torch.int32), "N"),
            wrap(torch.zeros(1, 1, 1, 3), "NHWC"),
            wrap(torch.ones(1, 1, 1, 3), "NHWC"),
        )


def test_cvcuda_backend_makes_one_call_per_step_for_the_whole_batch(fake_cvcuda):
    CvCudaPreprocessor(PreprocessSettings(resize=232, crop=224), CPU)(_images())
    names = [call[0] for call in fake_cvcuda.calls]
    assert names == ["as_images", "tvresize", "cfnr_into"]
    assert fake_cvcuda.calls[1] == ("tvresize", [232], "LINEAR", True)
    assert fake_cvcuda.calls[2][1:4] == ((3, 3, 224, 224), torch.float32, "NCHW")
    assert set(fake_cvcuda.calls[2][4]) == {2}  # no flip


@pytest.mark.parametrize("resize, crop", [(342, 299), (320, 300), (518, 518)])
def test_cvcuda_batch_is_contiguous_when_nvcv_would_pad_its_rows(fake_cvcuda, resize, crop):
    """NVCV pads rows to 32 bytes: fp32 crops that are not a multiple of 8 would come back strided."""
    settings = PreprocessSettings(resize=resize, crop=crop)
    ours = CvCudaPreprocessor(settings, CPU)(_images())
    assert ours.batch.is_contiguous()
    assert pixel_levels(ours.batch, CpuPreprocessor(settings)(_images()).batch, settings).max().item() <= 1.001


def test_cvcuda_hands_tensors_over_without_a_legacy_stream_wait(fake_cvcuda):
    CvCudaPreprocessor(PreprocessSettings(resize=232, crop=224), CPU)(_images())
    assert fake_cvcuda.waits and set(fake_cvcuda.waits) == {"none"}


def test_cvcuda_allocates_and_launches_on_the_current_gpu(fake_cvcuda, cuda):
    torch.cuda.set_device(1)
    CvCudaPreprocessor(PreprocessSettings(resize=232, crop=224), CPU)(_images())
    assert fake_cvcuda.allocations == [1]  # tvresize's output; the final batch is torch's


def test_fake_cvcuda_refuses_cpu_tensors_and_a_stream_of_another_gpu(cuda):
    """The fake itself: what CV-CUDA does with a CPU tensor, and with cuda:1's stream while cuda:0 is current."""
    fake = FakeCvcuda(cuda, SimulatedDeviceMemory())  # not installed: CPU tensors keep torch's refusal
    with pytest.raises(TypeError, match="not a CUDA buffer"):
        fake.as_tensor(torch.zeros(3), "N")
    with pytest.raises(RuntimeError, match="issue #212"):
        fake.tvresize([], [8], "LINEAR", stream=fake.as_stream(FakeStream(torch.device("cuda", 1))))


def test_cvcuda_backend_casts_to_the_artifact_precision(fake_cvcuda):
    out = CvCudaPreprocessor(PreprocessSettings(resize=64, crop=56), CPU, torch.float16)(_images()[:1])
    assert out.batch.dtype == torch.float16


def test_cvcuda_backend_without_cvcuda_says_how_to_install(monkeypatch):
    features.reset_cache()
    monkeypatch.setattr(features, "_probe_module", lambda name: (None, "ImportError: libcuda.so.1"))
    with pytest.raises(ImportError, match="libcuda.so.1.*pip install cvcuda"):
        CvCudaPreprocessor(PreprocessSettings(), CPU)


GPU0 = torch.device("cuda", 0)
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture
def nvjpeg(monkeypatch, cuda):
    """nvJPEG at torchvision's op (tests/support/fake_nvjpeg.py), on cuda:0 whose memory is the CPU's."""
    cuda.keep_cuda_tensors_on_cpu(monkeypatch)
    return FakeNvjpeg(cuda).install(monkeypatch)


def without_quantization_tables(jpeg: bytes) -> bytes:
    """A JPEG whose header still reads but which no decoder can decode (its DQT segments removed)."""
    out, at = bytearray(jpeg[:2]), 2
    while at < len(jpeg):
        marker, length = jpeg[at + 1], int.from_bytes(jpeg[at + 2 : at + 4], "big")
        if marker == 0xDA:
            return bytes(out + jpeg[at:])
        if marker != 0xDB:
            out += jpeg[at : at + 2 + length]
        at += 2 + length
    return bytes(out)


def test_jpegs_nvjpeg_refuses_are_decoded_on_the_cpu_not_refused(nvjpeg):
    """Chroma subsampling nvJPEG has no name for, and arithmetic coding: libjpeg-turbo decodes both."""
    payloads = [
        encode(noise_image(64, 48), "JPEG"),
        (FIXTURES / "jpeg_chroma_2x2_2x1_1x1.jpg").read_bytes(),
        (FIXTURES / "jpeg_arithmetic.jpg").read_bytes(),
    ]
    images = [probe(p, LIMIT) for p in payloads]
    decoded, failed = torch_cuda.decode_on_gpu(images, GPU0, nvjpeg=True)
    assert failed == {} and sorted(decoded) == [0, 1, 2]
    assert nvjpeg.calls == [3, 1, 1, 1]  # the batch, then each alone; the two refused went to the CPU decoder
    for index in (1, 2):
        assert torch.equal(decoded[index], decode_rgb(images[index]))


def test_gpu_decode_batches_jpegs_and_a_jpeg_no_decoder_reads_is_a_400(nvjpeg):
    broken = without_quantization_tables(encode(noise_image(200, 150), "JPEG"))
    images = [probe(encode(noise_image(64, 48), "JPEG"), LIMIT), probe(broken, LIMIT), probe(encode(noise_image(), "PNG"), LIMIT)]
    decoded, failed = torch_cuda.decode_on_gpu(images, GPU0, nvjpeg=True)
    assert nvjpeg.calls == [2, 1, 1]  # both JPEGs in one batched call first, then each alone
    assert sorted(decoded) == [0, 2] and list(failed) == [1] and failed[1].status == 400
    assert "the JPEG data is truncated or corrupt" in str(failed[1])  # the decoder's own words go to the log only
    assert "Quantization table" not in str(failed[1])


def test_every_nvjpeg_call_waits_for_work_queued_on_the_callers_stream(nvjpeg, cuda):
    """torchvision pull request #9606: outputs allocated on the caller's stream are written on nvJPEG's own."""
    cuda.set_device(1)
    images = [probe(encode(noise_image(64, 48), "JPEG"), LIMIT), probe(without_quantization_tables(encode(noise_image(), "JPEG")), LIMIT)]
    torch_cuda.decode_on_gpu(images, torch.device("cuda", 1), nvjpeg=True)
    assert len(nvjpeg.calls) == 3 and nvjpeg.unsynchronized == []
    assert ("synchronize", 1) in cuda.events and ("synchronize", 0) not in cuda.events


def test_truncated_jpeg_is_a_400_whatever_nvjpeg_does_with_it(monkeypatch, nvjpeg):
    """nvJPEG may return grey pixels for a truncated JPEG instead of raising: torchvision 0.29
    `torchvision/io/image.py` `decode_jpeg(list, device="cuda")` (-> `decode_jpegs_cuda`) only says it
    returns no partial results *on an error*. This stand-in takes the undocumented case: no error."""

    def lenient(images, mode, device):
        nvjpeg.calls.append(len(images))
        return [torch.full((3, 150, 200), 128, dtype=torch.uint8) for _ in images]

    monkeypatch.setattr(torch.ops.image, "decode_jpegs_cuda", lenient)
    whole = encode(noise_image(200, 150), "JPEG")
    images = [probe(whole, LIMIT), probe(whole[: len(whole) // 2], LIMIT), probe(whole + b"\0\0", LIMIT)]
    decoded, failed = torch_cuda.decode_on_gpu(images, GPU0, nvjpeg=True)
    assert sorted(decoded) == [0, 2] and list(failed) == [1] and failed[1].status == 400
    assert nvjpeg.calls == [2]  # the truncated one never reached nvJPEG


def test_gpu_decode_applies_exif_orientation_that_nvjpeg_ignores(nvjpeg):
    from PIL import Image

    exif = Image.Exif()
    exif[0x0112] = 6
    image = probe(encode(Image.new("RGB", (40, 20)), "JPEG", exif=exif), LIMIT)
    decoded, _ = torch_cuda.decode_on_gpu([image], GPU0, nvjpeg=True)
    assert tuple(decoded[0].shape) == (3, 40, 20) and nvjpeg.calls == [1]


def test_cuda_backend_matches_cpu_backend(monkeypatch):
    """The cuda backend's tensor path on CPU tensors (nvJPEG off) equals the CPU backend exactly."""
    monkeypatch.setattr(features, "has_nvjpeg", lambda device=None: False)
    settings = PreprocessSettings(resize=232, crop=224)
    ours = torch_cuda.CudaPreprocessor(settings, CPU)(_images())
    assert torch.equal(ours.batch, CpuPreprocessor(settings)(_images()).batch)


def test_a_jpeg_over_max_pixels_is_decoded_on_the_cpu_at_its_dct_scale_not_by_nvjpeg(nvjpeg):
    """nvJPEG has no scaled decode: a phone JPEG larger than max_pixels, admitted by its pixels at the DCT scale,
    is decoded as the CPU backend decodes it and uploaded; the others still go to nvJPEG, and each is counted so."""
    settings = PreprocessSettings(resize=64, crop=56, max_pixels=500_000)  # JPEGs decode down to a shorter side of 128
    backend = torch_cuda.CudaPreprocessor(settings, GPU0)
    large, small = (probe(encode(photo("chelsea", size), "JPEG"), LIMIT) for size in ((1024, 768), (640, 480)))
    decoded, failed = backend.decode([large, small])
    assert failed == {} and nvjpeg.calls == [1]  # the small one only
    assert tuple(decoded[0].shape) == (3, 192, 256)  # 1/4 of 1024x768
    assert torch.equal(decoded[0].cpu(), decode_rgb(large, 128))
    assert tuple(decoded[1].shape) == (3, 480, 640)  # nvJPEG decodes whole
    assert (backend.decoded_pixels(large), backend.decoded_pixels(small)) == (256 * 192, 640 * 480)
