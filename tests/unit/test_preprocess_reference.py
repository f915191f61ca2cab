"""The served tensor against torchvision's reference transforms on real ImageNet photos, for every backend here.

The reference is what classifier weights are evaluated with (PIL decode, `Resize`, `CenterCrop`,
`ToTensor`, `Normalize`); the served side is the preprocessing backend a worker builds from the archive's
settings (`tsvk.preprocess.build_preprocessor`), fed the photos' bytes in batches as TorchServe hands them.
Two settings: EfficientNet-Lite0's int8 build (resize and crop 224, mean and std 0.5) and ResNet-50's
V2 weights (232 / 224, ImageNet statistics). Tolerances, in uint8 levels of the normalized tensor:

- CPU, photos decoded at full size: the same libjpeg-turbo pixels; only the resize differs (torch's
  antialiased uint8 kernel against PIL's), by at most `FULL_MAX_LEVELS`, `FULL_MEAN_LEVELS` on average
  (measured on all 500 photos, lite0-int8: at most 2 levels, mean 0.002);
- CPU, JPEGs decoded at a reduced DCT scale (a shorter side of 4x the resize or more; 3 of the 500):
  the cost of that speed (docs/handler.md), at most `REDUCED_MAX_LEVELS`, `REDUCED_MEAN_LEVELS` on
  average (measured: at most 14 levels, mean 0.43, the most on the sharp edges of a 1836x1377 photo);
- cuda and cvcuda (nvJPEG, resize in float): torchvision's own bound for its CUDA decoder against the
  CPU one, a mean under `GPU_MEAN_LEVELS`; skipped with a reason where there is no CUDA.

`python tools/lab/bench/preprocess_drift.py` prints the same comparison stage by stage for a whole directory.
"""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torchvision.transforms as T
from PIL import Image

from tsvk.preprocess.decode import probe
from tsvk.preprocess import build_preprocessor
from tsvk.preprocess.cpu import DCT_OVERSAMPLE
from tsvk.preprocess.factory import PREFERENCE, unavailable_reason
from tsvk.common.settings import PreprocessSettings

PHOTOS = Path(__file__).resolve().parents[3] / "shared" / "imagenet-samples"  # ../shared, beside the checkout
EVERY = 10  # one photo in ten, spread over the classes, plus every photo the CPU decodes at a reduced scale
BATCH = 8  # photos per call, as a worker's batch
SETTINGS = {
    "lite0-int8": PreprocessSettings(resize=224, crop=224, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5)),
    "resnet50-v2": PreprocessSettings(resize=232, crop=224),
}
FULL_MAX_LEVELS = 2.0
FULL_MEAN_LEVELS = 0.01
REDUCED_MAX_LEVELS = 16.0
REDUCED_MEAN_LEVELS = 0.5
GPU_MEAN_LEVELS = 2.0


def _device(backend: str) -> torch.device:
    return torch.device("cpu") if backend == "cpu" else torch.device("cuda", 0)


def _backend_param(backend: str):
    if backend == "cpu":
        return backend
    reason = "needs CUDA: no GPU or no CUDA driver on this machine" if not torch.cuda.is_available() else \
        unavailable_reason(backend, _device(backend))
    return pytest.param(backend, marks=[pytest.mark.gpu, pytest.mark.skipif(bool(reason), reason=reason or "")])


@pytest.fixture(scope="module")
def photos() -> dict[str, bytes]:
    if not (PHOTOS / "wnids.txt").is_file():
        pytest.skip(f"{PHOTOS} is not here: the labelled ImageNet photos sit in ../shared beside the checkout")
    files = sorted(PHOTOS.glob("*.JPEG"))
    chosen = [f for i, f in enumerate(files) if i % EVERY == 0 or _reduced(Image.open(f).size, 224)]
    return {f.name: f.read_bytes() for f in chosen}


def _reduced(size: tuple[int, int], resize: int) -> bool:
    """Whether the CPU backend decodes a JPEG of this size at a reduced DCT scale (decode.py, `_reducible`)."""
    return min(size) >= 2 * DCT_OVERSAMPLE * resize


def reference(data: bytes, settings: PreprocessSettings) -> torch.Tensor:
    pipeline = T.Compose([T.Resize(settings.resize, interpolation=T.InterpolationMode.BILINEAR, antialias=True),
                          T.CenterCrop(settings.crop), T.ToTensor(), T.Normalize(settings.mean, settings.std)])
    return pipeline(Image.open(io.BytesIO(data)).convert("RGB"))


def served(payloads: list[bytes], settings: PreprocessSettings, backend: str) -> torch.Tensor:
    preprocessor, choice = build_preprocessor(replace(settings, backend=backend, strict=True), _device(backend))
    assert choice.name == backend
    parts = []
    for start in range(0, len(payloads), BATCH):
        result = preprocessor([probe(data, settings.max_pixels) for data in payloads[start:start + BATCH]])
        assert not result.failed, result.failed
        parts.append(result.batch.float().cpu())
    return torch.cat(parts)


def levels(ours: torch.Tensor, theirs: torch.Tensor, settings: PreprocessSettings) -> torch.Tensor:
    """|ours - theirs| per photo, in uint8 levels of the picture before normalization."""
    return (ours - theirs).abs() * 255 * torch.tensor(settings.std).view(1, 3, 1, 1)


@pytest.mark.parametrize("backend", [_backend_param(name) for name in PREFERENCE])
@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_the_served_tensor_is_torchvisions_within_the_stated_tolerance(photos, backend, name):
    settings = SETTINGS[name]
    names = list(photos)
    difference = levels(served(list(photos.values()), settings, backend),
                        torch.stack([reference(data, settings) for data in photos.values()]), settings)
    if backend != "cpu":
        assert difference.mean().item() < GPU_MEAN_LEVELS, (name, difference.mean().item())
        return
    reduced = torch.tensor([_reduced(Image.open(io.BytesIO(photos[n])).size, settings.resize) for n in names])
    assert 0 < int(reduced.sum()) < len(names)  # both kinds of photo are here
    full, small = difference[~reduced], difference[reduced]
    worst = names[int(difference.flatten(1).max(1).values.argmax())]
    assert full.max().item() <= FULL_MAX_LEVELS + 1e-3 and full.mean().item() < FULL_MEAN_LEVELS, (name, worst, full.max().item())
    assert small.max().item() <= REDUCED_MAX_LEVELS + 1e-3 and small.mean().item() < REDUCED_MEAN_LEVELS, (name, small.max().item())
