"""Where each pixel of the model's input came from in the ORIGINAL photo, and back.

Every image keeps its own scale, as torchvision's `GeneralizedRCNNTransform` does: the detector's
input is the photo resized by one factor (or to a fixed size), so a box found there maps back by the
ratio of the two sizes, per axis. "Original" is the photo as its viewer sees it: the size its header
declares, with width and height swapped where the EXIF orientation turns it on its side; a JPEG
decoded at a reduced DCT scale still maps back to its full size.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

import torch
import torch.nn.functional as nnf

from ..preprocess.decode import EncodedImage
from ..common.errors import ImageTooLarge
from ..common.defaults import RESIZE_GROUP_PIXELS
from ..preprocess.base import budget_slices
from ..common.settings import PreprocessSettings

_SIDEWAYS = (5, 6, 7, 8)  # EXIF orientations that transpose the stored image


def original_size(image: EncodedImage) -> tuple[int, int]:
    """(height, width) of the photo as displayed, EXIF orientation applied."""
    if image.orientation in _SIDEWAYS:
        return image.width, image.height
    return image.height, image.width


def resized_pixels(width: int, height: int, settings: PreprocessSettings) -> int:
    """Pixels of the photo once its shorter side is resized to `resize` (the longer side capped at `max_size`
    where set), before any crop: the size every task's transform makes in memory, in float for some."""
    if settings.fixed_size:
        return settings.fixed_size[0] * settings.fixed_size[1]
    short, long = sorted((width, height))
    scale = settings.resize / max(short, 1)
    if settings.max_size:
        scale = min(scale, settings.max_size / max(long, 1))
    return max(1, round(short * scale)) * max(1, round(long * scale))


def check_resized_pixels(image: EncodedImage, settings: PreprocessSettings) -> None:
    """Refuse a photo whose resize would outgrow `max_pixels`, before it is decoded.

    The header's pixel count bounds the decoded photo, not its resized copy: a shorter side of 1 pixel
    resized to 256 makes a 4000x1 PNG of 92 bytes 1,024,000 x 256 pixels (814 MiB in the classifier's
    CPU path). Only extreme aspect ratios get here (over 600:1 for a classifier's 256)."""
    pixels = resized_pixels(image.width, image.height, settings)
    if pixels > settings.max_pixels:
        raise ImageTooLarge(
            f"image is {image.width}x{image.height}; resizing its shorter side to {settings.resize} makes {pixels} "
            f"pixels, over the limit of {settings.max_pixels} (preprocess.max_pixels): crop it to a less extreme aspect ratio"
        )


def group_by_size(images: Sequence[torch.Tensor]) -> dict[tuple[int, int], list[int]]:
    """Indices of same-size images, so each size is resized in one call."""
    groups: dict[tuple[int, int], list[int]] = defaultdict(list)
    for index, image in enumerate(images):
        groups[(int(image.shape[-2]), int(image.shape[-1]))].append(index)
    return groups


def same_size_slices(images: Sequence[torch.Tensor], budget: int = RESIZE_GROUP_PIXELS) -> list[list[int]]:
    """Indices of same-size images in slices whose pixels add up to at most `budget` (a larger image
    alone): each slice is resized in one call, and no slice's float copy outgrows the budget."""
    slices: list[list[int]] = []
    for indices in group_by_size(images).values():
        pixels = [int(images[i].shape[-2]) * int(images[i].shape[-1]) for i in indices]
        slices += [[indices[j] for j in part] for part in budget_slices(pixels, budget)]
    return slices


def detector_resize(batch: torch.Tensor, settings: PreprocessSettings) -> torch.Tensor:
    """(N, 3, H, W) float of one size -> resized as torchvision's detection transform does: bilinear,
    no antialias, to `fixed_size` (width, height), or by min(resize / shorter, max_size / longer)."""
    if settings.fixed_size:
        width, height = settings.fixed_size
        return nnf.interpolate(batch, size=[height, width], mode="bilinear", align_corners=False)
    height, width = batch.shape[-2:]
    scale = settings.resize / min(height, width)
    if settings.max_size:
        scale = min(scale, settings.max_size / max(height, width))
    return nnf.interpolate(batch, scale_factor=scale, mode="bilinear", recompute_scale_factor=True, align_corners=False)


def map_boxes(boxes: torch.Tensor, resized: tuple[int, int], original: tuple[int, int]) -> torch.Tensor:
    """(K, 4) x1, y1, x2, y2 in the model input's pixels -> the original photo's, clipped to it."""
    (resized_h, resized_w), (height, width) = resized, original
    ratio = torch.tensor([width, height], dtype=torch.float32) / torch.tensor([resized_w, resized_h], dtype=torch.float32)
    mapped = boxes.float() * ratio.repeat(2).to(boxes.device)  # float32 ratios, as torchvision's resize_boxes
    limit = torch.tensor([width, height, width, height], dtype=torch.float32, device=boxes.device)
    return torch.minimum(mapped.clamp(min=0), limit)


def fit_within(size: tuple[int, int], max_side: int) -> tuple[int, int]:
    """(height, width) scaled down so the longer side is at most `max_side` (0: unchanged), at least 1x1."""
    height, width = size
    if not max_side or max(height, width) <= max_side:
        return height, width
    scale = max_side / max(height, width)
    return max(1, round(height * scale)), max(1, round(width * scale))


def fit_pixels(size: tuple[int, int], max_pixels: int) -> tuple[int, int]:
    """(height, width) scaled down to at most `max_pixels`, keeping its shape: a 108 MP photo decoded at a reduced DCT
    scale would otherwise have its label map (and the PNG encoding it) made at 108 MP, more than any decoded image."""
    height, width = size
    if height * width <= max_pixels:
        return height, width
    scale = (max_pixels / (height * width)) ** 0.5
    return max(1, int(height * scale)), max(1, int(width * scale))


def resize_label_map(label_map: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """(H, W) class indices -> `size` by nearest neighbour: every pixel keeps a class the model gave.

    Fewer than 256 classes are resized as uint8 (the same pixels as through float, a quarter of the
    memory: a 36 MP map takes 36 MB, not 144 MB of float and 288 MB of int64) and come back as uint8."""
    if tuple(label_map.shape) == tuple(size):
        return label_map
    if label_map.numel() and int(label_map.max()) < 256 and int(label_map.min()) >= 0:
        return nnf.interpolate(label_map.to(torch.uint8)[None, None], size=list(size), mode="nearest-exact")[0, 0]
    resized = nnf.interpolate(label_map[None, None].float(), size=list(size), mode="nearest-exact")
    return resized[0, 0].to(label_map.dtype)
