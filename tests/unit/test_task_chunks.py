"""Detection and segmentation decode and transform a batch in chunks within `preprocess.max_batch_pixels`,
on every preprocessing backend: the same inputs as one chunk, with a fraction of the memory.

The GPU backends are checked up to their seams on the CPU (nvJPEG replaced by CPU decode, CV-CUDA by
tests/support/fake_cvcuda.py); the chunking has not run on a GPU here.
"""

from __future__ import annotations

import multiprocessing
import types
import weakref

import pytest
import torch
from PIL import Image

from tsvk.common import features
from tsvk.preprocess.decode import decode_rgb, probe
from tsvk.tasks.loaded_model import LoadedModel
from tsvk.preprocess import torch_cuda
from tsvk.preprocess.cpu import CpuPreprocessor
from tsvk.preprocess.cv_cuda import CvCudaPreprocessor
from tsvk.common.settings import HandlerSettings
from tsvk.tasks import task_class

from tests.support import peak_memory
from tests.support.fake_cuda import SimulatedDeviceMemory
from tests.support.fake_cvcuda import FakeCvcuda
from tests.support.handler_fakes import encode, noise_image

torch.set_num_threads(1)
LIMIT = 50_000_000
CPU = torch.device("cpu")
BUILDERS = {"detect": "fasterrcnn_mobilenet_v3_large_320_fpn", "segment": "lraspp_mobilenet_v3_large"}


def _settings(task: str, max_batch_pixels: int, resize: int = 64) -> HandlerSettings:
    return HandlerSettings.from_dict({
        "model_name": "m", "task": task,
        "artifact": {"file": "model.pt", "format": "eager", "source": {"builder": BUILDERS[task]}},
        "preprocess": {"crop": 0, "resize": resize, "max_size": 2 * resize, "max_batch_pixels": max_batch_pixels}})


def _task(task: str, max_batch_pixels: int, preprocessor=None, resize: int = 64):
    settings = _settings(task, max_batch_pixels, resize)
    model = LoadedModel(forward=types.SimpleNamespace(), device=CPU, input_dtype=torch.float32, format="eager")
    return task_class(task)(settings, model, preprocessor or CpuPreprocessor(settings.preprocess), None)


def _mixed_images():
    """Same-size and odd-size photos, a corrupt one among them, in a PNG and JPEG mix."""
    payloads = [encode(noise_image(120, 90, seed=0), "PNG"), encode(noise_image(120, 90, seed=1), "JPEG"),
                encode(noise_image(120, 90, seed=2), "PNG")[:300], encode(noise_image(200, 80, seed=3), "PNG"),
                encode(noise_image(120, 90, seed=4), "PNG"), encode(noise_image(60, 140, seed=5), "JPEG")]
    return [probe(p, LIMIT) for p in payloads]


def _inputs(task: str, batch) -> dict[int, torch.Tensor]:
    """Each kept image's model input, by kept position."""
    if task == "detect":
        return dict(enumerate(batch.inputs))
    return {slot: inputs[row] for slots, inputs in batch.groups for row, slot in enumerate(slots)}


@pytest.mark.parametrize("task", ["detect", "segment"])
def test_chunks_give_the_same_inputs_and_failures_as_one_chunk(task):
    whole = _task(task, 10**9).prepare(_mixed_images())
    chunked = _task(task, 20_000).prepare(_mixed_images())  # about two of these photos a chunk
    assert chunked.kept == whole.kept == [0, 1, 3, 4, 5] and list(chunked.failed) == list(whole.failed) == [2]
    assert chunked.batch.original == whole.batch.original
    ours, reference = _inputs(task, chunked.batch), _inputs(task, whole.batch)
    assert sorted(ours) == sorted(reference) == list(range(5))
    assert all(torch.equal(ours[i], reference[i]) for i in ours)


BIG = (2000, 1500)  # 3 MP, twenty-four of them: 72 MP in the batch
PHOTOS = 24
CHUNK = 6_000_000  # two a chunk
# Measured here (AMD EPYC), eight photos: detect 150-160 MiB, segment 65-80 MiB (one chunk, whatever the batch);
# the whole batch at once: 452 and 177 MiB (all photos decoded, a uint8 copy to stack them, and a detector's float
# copy of all of them), three times that for twenty-four. The bounds leave room for a heap other tests have fragmented.
PEAK_MIB = {"detect": 320, "segment": 220}


def _batch_peak_growth(task: str) -> tuple[list[int], float]:
    """In a process of its own: the images kept and the peak memory growth (MiB) of one prepared batch."""
    payloads = [encode(Image.new("RGB", BIG, (15 * i, 90, 200 - 10 * i)), "PNG") for i in range(PHOTOS)]
    images = [probe(p, LIMIT) for p in payloads]
    chunked = _task(task, CHUNK, resize=320)
    chunked.prepare(images[:1])  # warm up: first-call allocations are not the batch's
    with peak_memory.peak_growth() as peak:
        result = chunked.prepare(images)
    return result.kept, peak["mib"]


@pytest.mark.skipif(not peak_memory.available(), reason="needs Linux's /proc/self/clear_refs")
@pytest.mark.parametrize("task", ["detect", "segment"])
def test_a_batch_of_large_photos_holds_one_chunk_at_full_size(task):
    """Measured in a fresh process: after hundreds of other tests, the heap of the test process itself
    grew by more than a whole batch's worth, whatever the chunking."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        kept, mib = pool.apply(_batch_peak_growth, (task,))
    assert kept == list(range(PHOTOS))
    assert mib < PEAK_MIB[task], f"{task}: {PHOTOS} 3 MP PNGs grew memory by {mib:.0f} MiB"


class _LiveDecodes:
    """nvJPEG's stand-in (CPU decode) that records, at each call, the batch size and how many images it
    decoded before are still alive."""

    def __init__(self):
        self.calls: list[tuple[int, int]] = []
        self._decoded: list[weakref.ref] = []

    def __call__(self, payloads, device):
        alive = sum(ref() is not None for ref in self._decoded)
        self.calls.append((len(payloads), alive))
        images = [decode_rgb(probe(p, LIMIT)) for p in payloads]
        self._decoded += [weakref.ref(image) for image in images]
        return images


def _jpegs(count: int = 6):
    return [probe(encode(noise_image(160, 120, seed=i), "JPEG"), LIMIT) for i in range(count)]


@pytest.fixture
def nvjpeg(monkeypatch):
    fake = _LiveDecodes()
    monkeypatch.setattr(features, "has_nvjpeg", lambda device=None: True)
    monkeypatch.setattr(torch_cuda, "nvjpeg_decode", fake)
    return fake


def test_cuda_backend_decodes_a_chunk_at_a_time_and_lets_it_go(nvjpeg):
    settings = _settings("detect", 2 * 160 * 120).preprocess
    preprocessor = torch_cuda.CudaPreprocessor(settings, CPU)
    _task("detect", 2 * 160 * 120, preprocessor).prepare(_jpegs())
    assert nvjpeg.calls == [(2, 0), (2, 0), (2, 0)]


def test_cuda_classifier_batch_is_the_same_in_chunks(nvjpeg):
    from tsvk.common.settings import PreprocessSettings

    whole = torch_cuda.CudaPreprocessor(PreprocessSettings(resize=64, crop=56), CPU)(_jpegs())
    nvjpeg.calls.clear()
    chunked = torch_cuda.CudaPreprocessor(PreprocessSettings(resize=64, crop=56, max_batch_pixels=3 * 160 * 120), CPU)(_jpegs())
    assert nvjpeg.calls == [(3, 0), (3, 0)]
    assert chunked.kept == whole.kept == list(range(6)) and torch.equal(chunked.batch, whole.batch)


def test_cvcuda_backend_transforms_a_chunk_at_a_time(monkeypatch, cuda, nvjpeg):
    from tsvk.common.settings import PreprocessSettings

    fake = FakeCvcuda(cuda, SimulatedDeviceMemory().install(monkeypatch))
    monkeypatch.setattr(features, "optional_module", lambda name: fake if name == "cvcuda" else pytest.fail(name))
    whole = CvCudaPreprocessor(PreprocessSettings(resize=64, crop=56), CPU)(_jpegs())
    fake.calls.clear()
    nvjpeg.calls.clear()
    chunked = CvCudaPreprocessor(PreprocessSettings(resize=64, crop=56, max_batch_pixels=2 * 160 * 120), CPU)(_jpegs())
    assert nvjpeg.calls == [(2, 0), (2, 0), (2, 0)]
    assert [call[0] for call in fake.calls] == ["as_images", "tvresize", "cfnr_into"] * 3
    assert chunked.kept == whole.kept == list(range(6)) and torch.equal(chunked.batch, whole.batch)
    segment = _task("segment", 2 * 160 * 120, CvCudaPreprocessor(_settings("segment", 2 * 160 * 120).preprocess, CPU))
    nvjpeg.calls.clear()
    assert segment.prepare(_jpegs()).kept == list(range(6)) and nvjpeg.calls == [(2, 0), (2, 0), (2, 0)]


@pytest.mark.parametrize("task, option, value, message", [
    ("detect", "max_detections", "1001", "max_detections must be a whole number from 1 to 1000"),
    ("detect", "score_threshold", "0.01", "score_threshold must be a number from 0.05 to 1"),
    ("segment", "label_map_max_side", "65537", "label_map_max_side must be a whole number from 0 to 65536"),
])
def test_options_that_would_grow_an_answer_are_refused_past_their_cap(task, option, value, message):
    from tsvk.common.errors import BadRequest

    with pytest.raises(BadRequest, match=message) as refused:
        _task(task, 10**9).options({option: value})
    assert refused.value.status == 400
