"""The segmenter's fast CPU path gives the reference's numbers: the class map is argmax's, and the
normalized input is torchvision's transform of the decoded photo within one uint8 level, whatever the
photo's size, shape, mode or EXIF orientation."""

import io

import numpy as np
import pytest
import torch
import torchvision.transforms.v2.functional as F
from PIL import Image, ImageOps

from tsvk.preprocess.decode import probe
from tsvk.preprocess.cpu import CpuPreprocessor
from tsvk.preprocess.tensor_ops import Normalizer
from tsvk.common.settings import PreprocessSettings
from tsvk.tasks.segment import class_map, normalized_groups, segmenter_resize

from tests.support.handler_fakes import encode, noise_image, photo

torch.set_num_threads(1)
LIMIT = 50_000_000
# torchvision's DeepLabV3 weights: shorter side 520 (the bench's segmenter), bilinear with antialias
SEGMENTER = PreprocessSettings(resize=520, crop=0, max_size=2048, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
ONE_LEVEL = 1.0 / (255 * min(SEGMENTER.std))


@pytest.mark.parametrize("classes", [2, 21, 91, 256])
@pytest.mark.parametrize("shape", [(1, 7, 9), (3, 33, 20), (2, 64, 64)])
def test_class_map_is_argmax(classes, shape):
    batch, height, width = shape
    generator = torch.Generator().manual_seed(classes * height)
    scores = torch.randn(batch, classes, height, width, generator=generator)
    found = class_map(scores)
    assert found.dtype == torch.uint8
    assert torch.equal(found.long(), scores.argmax(1))


def test_class_map_takes_the_first_of_equal_scores_as_argmax_does():
    scores = torch.randint(0, 3, (2, 21, 16, 16), generator=torch.Generator().manual_seed(1)).float()  # many ties
    assert torch.equal(class_map(scores).long(), scores.argmax(1))


def test_class_map_with_a_nan_score_is_argmax():
    scores = torch.randn(1, 5, 4, 4, generator=torch.Generator().manual_seed(2))
    scores[0, 3, 1, 2] = float("nan")
    assert torch.equal(class_map(scores).long(), scores.argmax(1))
    assert int(class_map(scores)[0, 1, 2]) == 3


@pytest.mark.parametrize("classes", [1, 300])
def test_class_map_outside_uint8_is_argmax_in_int64(classes):
    scores = torch.randn(1, classes, 3, 4, generator=torch.Generator().manual_seed(3))
    assert class_map(scores).dtype == torch.int64
    assert torch.equal(class_map(scores), scores.argmax(1))


def test_normalizer_writes_contiguous_nchw_with_the_same_numbers():
    """Resized images come channels-last; the model takes NCHW: one copy converts both at once."""
    settings = SEGMENTER
    pixels = torch.randint(0, 256, (2, 37, 53, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(4))
    channels_last = pixels.permute(0, 3, 1, 2)
    normalize = Normalizer(settings, torch.device("cpu"))
    out = normalize(channels_last)
    assert out.is_contiguous() and out.shape == (2, 3, 37, 53) and out.dtype == torch.float32
    assert torch.equal(out, torch.addcmul(normalize.offset, channels_last.float(), normalize.scale))


def _reference(data: bytes) -> torch.Tensor:
    """torchvision's segmentation preset on the photo as displayed: float resize, then normalize."""
    with Image.open(io.BytesIO(data)) as image:
        rgb = ImageOps.exif_transpose(image).convert("RGB")
    tensor = F.to_dtype(F.pil_to_tensor(rgb), torch.float32, scale=True)
    resized = F.resize(tensor, [SEGMENTER.resize], max_size=SEGMENTER.max_size, antialias=True)
    return F.normalize(resized, list(SEGMENTER.mean), list(SEGMENTER.std))


def _ours(data: bytes) -> torch.Tensor:
    normalize = Normalizer(SEGMENTER, torch.device("cpu"))
    parts, failed = CpuPreprocessor(SEGMENTER).in_chunks(
        [probe(data, LIMIT)], lambda images: normalized_groups(segmenter_resize(images, SEGMENTER), normalize))
    assert not failed
    return parts[0][1][0][1][0]


def _exif(orientation: int) -> Image.Exif:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return exif


def _cases() -> dict[str, bytes]:
    rng = np.random.default_rng(5)
    cases = {f"photo {w}x{h}": encode(photo("chelsea", (w, h)), "JPEG", quality=92)
             for w, h in [(640, 480), (480, 640), (300, 200), (1100, 700), (900, 300)]}
    cases["photo rotated by EXIF 6"] = encode(photo("coffee", (500, 360)), "JPEG", quality=92, exif=_exif(6))
    cases["photo flipped by EXIF 2, PNG"] = encode(photo("astronaut", (333, 250)), "PNG", exif=_exif(2))
    cases["greyscale PNG"] = encode(photo("camera", (410, 300)).convert("L"), "PNG")
    cases["greyscale JPEG"] = encode(photo("camera", (410, 300)).convert("L"), "JPEG", quality=95)
    cases["CMYK JPEG"] = encode(photo("chelsea", (360, 270)).convert("CMYK"), "JPEG", quality=95)
    alpha = photo("rocket", (280, 420)).convert("RGBA")
    alpha.putalpha(Image.fromarray(rng.integers(0, 256, (420, 280), dtype=np.uint8)))
    cases["RGBA PNG"] = encode(alpha, "PNG")
    cases["noise, small"] = encode(noise_image(97, 61, seed=6), "PNG")
    return cases


CASES = _cases()


@pytest.mark.parametrize("name", sorted(CASES))
def test_segmenter_input_is_torchvision_preset_within_one_level(name):
    ours, reference = _ours(CASES[name]), _reference(CASES[name])
    assert ours.shape == reference.shape
    difference = (ours - reference).abs()
    assert difference.max().item() <= ONE_LEVEL + 1e-4, name
    assert difference.mean().item() < 0.5 * ONE_LEVEL, name  # rounding the resize to uint8: 0.25 level on average
