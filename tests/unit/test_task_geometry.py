"""Box and mask mapping: the same arithmetic as torchvision's detection transform, back to the original photo."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pycocotools import mask as coco_mask
from torchvision.models.detection.transform import GeneralizedRCNNTransform, resize_boxes

from tsvk.preprocess.decode import EncodedImage
from tsvk.common.settings import PreprocessSettings
from tsvk.tasks.geometry import detector_resize, fit_within, map_boxes, original_size, resize_label_map
from tsvk.tasks.rle import decode_mask, encode_mask, run_lengths


@pytest.mark.parametrize("orientation, expected", [(1, (300, 451)), (3, (300, 451)), (6, (451, 300)), (8, (451, 300)),
                                                   (5, (451, 300)), (2, (300, 451))])
def test_original_size_is_the_displayed_size(orientation, expected):
    image = EncodedImage(b"", "JPEG", width=451, height=300, mode="RGB", orientation=orientation)
    assert original_size(image) == expected


@pytest.mark.parametrize("size, settings", [
    ((300, 451), PreprocessSettings(resize=320, crop=0, max_size=640)),
    ((900, 200), PreprocessSettings(resize=320, crop=0, max_size=640)),  # the longer side decides
    ((480, 640), PreprocessSettings(resize=800, crop=0, max_size=1333)),
    ((300, 451), PreprocessSettings(resize=320, crop=0, max_size=320, fixed_size=(320, 320))),
])
def test_detector_resize_is_torchvisions(size, settings):
    image = torch.rand(3, *size)
    transform = GeneralizedRCNNTransform(settings.resize, settings.max_size, [0.0] * 3, [1.0] * 3,
                                         fixed_size=settings.fixed_size or None).eval()
    expected, _ = transform.resize(image)
    got = detector_resize(image[None], settings)[0]
    assert got.shape == expected.shape and torch.equal(got, expected)


def test_boxes_map_back_as_torchvision_maps_them_and_stay_inside_the_photo():
    boxes = torch.tensor([[10.0, 20.0, 200.0, 150.0], [0.0, 0.0, 427.0, 320.0], [-3.0, 5.0, 430.0, 321.0]])
    expected = resize_boxes(boxes, [320, 427], [480, 640])
    got = map_boxes(boxes, (320, 427), (480, 640))
    assert torch.allclose(got[:2], expected[:2])
    assert got[2].tolist() == [0.0, pytest.approx(5.0 * 1.5), 640.0, 480.0]  # clipped to the photo


def test_fit_within_keeps_the_aspect_ratio():
    assert fit_within((300, 451), 0) == (300, 451)
    assert fit_within((300, 451), 1000) == (300, 451)
    assert fit_within((300, 451), 100) == (67, 100)
    assert fit_within((5000, 3), 100) == (100, 1)


def test_label_map_resize_keeps_only_classes_it_had():
    label_map = torch.tensor([[0, 0, 7], [3, 3, 7]], dtype=torch.uint8)
    bigger = resize_label_map(label_map, (20, 30))
    assert bigger.shape == (20, 30) and set(bigger.unique().tolist()) == {0, 3, 7}
    assert bigger[0, 0] == 0 and bigger[-1, 0] == 3 and bigger[0, -1] == 7


@pytest.mark.parametrize("height, width, fill", [(1, 1, 0.0), (1, 1, 1.0), (5, 7, 0.5), (64, 3, 0.02), (120, 90, 0.97)])
def test_rle_is_what_pycocotools_writes_and_reads(height, width, fill):
    mask = torch.rand(height, width, generator=torch.Generator().manual_seed(height * width)) < fill
    ours = encode_mask(mask)
    reference = coco_mask.encode(np.asfortranarray(mask.numpy().astype(np.uint8)))
    assert ours == {"size": [height, width], "counts": reference["counts"].decode("ascii")}
    assert np.array_equal(coco_mask.decode({"size": ours["size"], "counts": ours["counts"].encode()}), mask.numpy())
    assert torch.equal(decode_mask(ours), mask)
    assert sum(run_lengths(mask)) == height * width


def test_detector_normalization_is_torchvisions_to_the_bit_and_leaves_the_photos_alone():
    import types

    from tsvk.tasks.detect import DetectTask

    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    photos = torch.randint(0, 256, (2, 3, 48, 64), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    kept = photos.clone()
    task = types.SimpleNamespace(mean=torch.tensor(mean).view(1, 3, 1, 1), std=torch.tensor(std).view(1, 3, 1, 1))
    transform = GeneralizedRCNNTransform(320, 640, mean, std)
    got = DetectTask.normalize(task, photos)
    assert torch.equal(got, torch.stack([transform.normalize(p.float() / 255) for p in photos]))
    assert torch.equal(photos, kept)


def test_a_label_map_is_resized_in_uint8_to_the_same_pixels_as_through_float():
    label_map = torch.randint(0, 21, (52, 75), generator=torch.Generator().manual_seed(0))  # argmax gives int64
    bigger = resize_label_map(label_map, (500, 721))
    reference = torch.nn.functional.interpolate(label_map[None, None].float(), size=[500, 721], mode="nearest-exact")[0, 0]
    assert bigger.dtype == torch.uint8 and torch.equal(bigger.long(), reference.long())
    wide = resize_label_map(label_map + 300, (60, 80))  # past 256 classes: through float, in the map's own type
    assert wide.dtype == torch.int64 and int(wide.min()) >= 300
