"""CPU preprocessing against torchvision's reference transforms, on real photographs."""

import dataclasses
import io

import pytest
import torch
from PIL import Image
from torchvision.models import ResNet50_Weights, resnet18

from tsvk.preprocess.decode import probe
from tsvk.preprocess.cpu import CpuPreprocessor
from tsvk.preprocess.cv_cuda import crop_rects, resized_hw
from tsvk.preprocess.tensor_ops import Normalizer, group_by_size, resize_crop_stack
from tsvk.common.settings import PreprocessSettings

from tests.support.handler_fakes import encode, noise_image, photo

torch.set_num_threads(1)
LIMIT = 50_000_000
# One uint8 level after normalization: 1 / (255 * min(std)) = 0.0175 for ImageNet statistics.
ONE_LEVEL = 1.0 / (255 * 0.224)

WEIGHTS = ResNet50_Weights.IMAGENET1K_V2
REFERENCE = WEIGHTS.transforms()
RESNET_SETTINGS = PreprocessSettings(
    resize=REFERENCE.resize_size[0], crop=REFERENCE.crop_size[0], mean=tuple(REFERENCE.mean), std=tuple(REFERENCE.std)
)
PHOTOS = ("chelsea", "coffee", "astronaut")


def _reference(data: bytes) -> torch.Tensor:
    return REFERENCE(Image.open(io.BytesIO(data)).convert("RGB"))


def _cpu_batch(payloads, settings=RESNET_SETTINGS) -> torch.Tensor:
    return CpuPreprocessor(settings)([probe(p, LIMIT) for p in payloads]).batch


@pytest.fixture(scope="module")
def photo_jpegs():
    return [encode(photo(name), "JPEG", quality=92) for name in PHOTOS]


def test_settings_come_from_the_weights_not_constants():
    assert (RESNET_SETTINGS.resize, RESNET_SETTINGS.crop) == (232, 224)


def test_photographs_match_torchvision_reference_within_one_level(photo_jpegs):
    ours = _cpu_batch(photo_jpegs)
    reference = torch.stack([_reference(data) for data in photo_jpegs])
    assert ours.shape == reference.shape == (3, 3, 224, 224)
    difference = (ours - reference).abs()
    assert difference.max().item() <= ONE_LEVEL + 1e-4
    assert difference.mean().item() < 1e-3


def test_random_resnet18_gives_the_same_top5_as_the_reference(photo_jpegs):
    torch.manual_seed(0)
    model = resnet18(num_classes=1000).eval()
    with torch.inference_mode():
        ours = model(_cpu_batch(photo_jpegs)).topk(5).indices
        reference = model(torch.stack([_reference(d) for d in photo_jpegs])).topk(5).indices
    assert torch.equal(ours, reference)


@pytest.mark.parametrize(
    "settings",
    [
        PreprocessSettings(resize=256, crop=224),
        PreprocessSettings(resize=160, crop=128, interpolation="bicubic"),
        PreprocessSettings(resize=96, crop=96, antialias=False),
        PreprocessSettings(resize=64, crop=80),  # crop larger than the resize: padded like torchvision
        PreprocessSettings(resize=300, crop=299, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5), interpolation="nearest"),
    ],
)
def test_archive_parameters_are_followed(settings):
    from torchvision.transforms import v2

    data = encode(photo("coffee"), "PNG")
    reference = v2.Compose(
        [
            v2.PILToTensor(),
            v2.Resize(settings.resize, interpolation=_mode(settings.interpolation), antialias=settings.antialias),
            v2.CenterCrop(settings.crop),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(settings.mean, settings.std),
        ]
    )(Image.open(io.BytesIO(data)).convert("RGB"))
    ours = _cpu_batch([data], settings)[0]
    assert ours.shape == (3, settings.crop, settings.crop)
    assert (ours - reference).abs().max().item() < 1e-4  # same tensor ops: equal up to float rounding


def _mode(name):
    from torchvision.transforms import InterpolationMode

    return {"bilinear": InterpolationMode.BILINEAR, "bicubic": InterpolationMode.BICUBIC, "nearest": InterpolationMode.NEAREST}[name]


def test_mixed_sizes_are_grouped_and_returned_in_input_order():
    images = [torch.from_numpy(noise_image(w, h, seed=i)).permute(2, 0, 1) for i, (w, h) in enumerate([(64, 48), (50, 80), (64, 48)])]
    assert group_by_size(images) == {(48, 64): [0, 2], (80, 50): [1]}
    settings = PreprocessSettings(resize=40, crop=32)
    together = resize_crop_stack(images, settings)
    one_by_one = torch.cat([resize_crop_stack([image], settings) for image in images])
    assert torch.equal(together, one_by_one)


def test_normalizer_is_mean_std_normalization():
    settings = PreprocessSettings(mean=(0.1, 0.2, 0.3), std=(0.5, 0.25, 0.125))
    batch = torch.randint(0, 256, (2, 3, 4, 4), dtype=torch.uint8)
    expected = (batch.float() / 255 - torch.tensor(settings.mean).view(1, 3, 1, 1)) / torch.tensor(settings.std).view(1, 3, 1, 1)
    assert torch.allclose(Normalizer(settings, torch.device("cpu"))(batch), expected, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_reduced_precision_artifacts_get_their_input_dtype(dtype):
    batch = CpuPreprocessor(PreprocessSettings(resize=40, crop=32), dtype=dtype)([probe(encode(noise_image()), LIMIT)]).batch
    assert batch.dtype == dtype


def test_corrupt_image_in_a_batch_fails_alone():
    good, bad = encode(noise_image(seed=1)), encode(noise_image(200, 150, seed=2))
    images = [probe(good, LIMIT), probe(bad[: len(bad) // 2], LIMIT), probe(good, LIMIT)]
    result = CpuPreprocessor(PreprocessSettings(resize=40, crop=32))(images)
    assert result.kept == [0, 2] and list(result.failed) == [1]
    assert result.failed[1].status == 400 and result.batch.shape[0] == 2


@pytest.mark.parametrize("height, width", [(480, 640), (640, 480), (300, 451), (224, 224)])
def test_cvcuda_crop_rects_match_torchvision_geometry(height, width):
    from torchvision.transforms.v2 import functional as F

    image = torch.zeros(1, height, width)
    resized = F.resize(image, [232], antialias=True)
    assert resized_hw(height, width, 232) == tuple(resized.shape[-2:])
    marker = torch.arange(resized.numel(), dtype=torch.float32).view(resized.shape)
    x, y, w, h = crop_rects([(height, width)], 232, 224)[0]
    assert torch.equal(marker[..., y : y + h, x : x + w], F.center_crop(marker, [224, 224]))


@pytest.fixture(scope="module")
def large_photo_jpegs():
    """Phone-camera sizes: DCT scaling decodes these at 1/4 (resize 232: 800x600 left of 3200x2400)."""
    return [encode(photo(name, (3200, 2400)), "JPEG", quality=92) for name in PHOTOS]


def test_large_photographs_decoded_at_reduced_scale_stay_within_the_documented_tolerance(large_photo_jpegs):
    reference = torch.stack([_reference(data) for data in large_photo_jpegs])
    reduced = _cpu_batch(large_photo_jpegs)
    full = _cpu_batch(large_photo_jpegs, dataclasses.replace(RESNET_SETTINGS, jpeg_dct_scaling=False))
    assert (full - reference).abs().max().item() <= ONE_LEVEL + 1e-4  # switched off: the exact path
    difference = (reduced - reference).abs()
    assert 0 < difference.max().item() <= 5 * ONE_LEVEL  # docs/handler.md: at most 5 levels, mean under 0.3
    assert difference.mean().item() < 0.3 * ONE_LEVEL
    torch.manual_seed(0)
    model = resnet18(num_classes=1000).eval()
    with torch.inference_mode():
        assert torch.equal(model(reduced).topk(5).indices, model(reference).topk(5).indices)


def test_reduced_decode_is_asked_for_twice_the_resize_and_can_be_switched_off():
    assert CpuPreprocessor(RESNET_SETTINGS).min_short_side == 2 * RESNET_SETTINGS.resize
    assert CpuPreprocessor(dataclasses.replace(RESNET_SETTINGS, jpeg_dct_scaling=False)).min_short_side == 0
