"""What every preprocessing backend takes and returns.

A backend turns the encoded images of one batch into one normalized NCHW tensor on the model's
device. Images that fail to decode are reported per index instead of failing the batch.

Every backend, for every task, decodes a batch in chunks whose decoded pixels stay within
`preprocess.max_batch_pixels` (an image larger than that, but within `max_pixels`, is a chunk alone),
each image counted as its backend decodes it (`decoded_pixels`: a large JPEG at its reduced DCT scale),
and each chunk is transformed to the model's much smaller input before the next one is decoded: eight
large PNGs never sit in memory at full size together, and batches of ordinary photos are one chunk.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence, TypeVar

import torch

from .decode import EncodedImage, decoded_pixels
from ..common.errors import RequestError
from ..common.settings import PreprocessSettings

Transformed = TypeVar("Transformed")
DCT_OVERSAMPLE = 2  # 1/4 scale for a 12 MP photo and resize 256: 1008x756 left for the antialiased resize
Decoder = Callable[[Sequence[EncodedImage]], "tuple[dict[int, torch.Tensor], dict[int, RequestError]]"]


@dataclass
class PreprocessResult:
    """`batch[i]` is the image at input position `kept[i]`; `failed` maps input positions to errors."""

    batch: torch.Tensor | None
    kept: list[int]
    failed: dict[int, RequestError] = field(default_factory=dict)


class Preprocessor:
    """Base class: subclasses set `name` and implement `decode` (pixels only) and `transform` (the
    classifier's resize, crop and normalize of decoded images); tasks whose transform is their own
    (detection, segmentation) pass it to `in_chunks`."""

    name = "base"

    def __init__(self, settings: PreprocessSettings, device: torch.device, dtype: torch.dtype = torch.float32):
        self.settings = settings
        self.device = device
        self.dtype = dtype
        # the shorter side a JPEG decoded at a reduced DCT scale keeps (0: never reduced); the probe counts by it too
        self.min_short_side = dct_short_side(settings)

    def decoded_pixels(self, image: EncodedImage) -> int:
        """Pixels this backend's decoder holds for `image`: a reducible JPEG at its DCT scale (the CPU backend's way)."""
        return decoded_pixels(image, self.min_short_side)

    def __call__(self, images: Sequence[EncodedImage]) -> PreprocessResult:
        """The classifier's whole transform, a chunk at a time, as one batch on the model's device."""
        parts, failed = self.in_chunks(images, self.transform, self.decode_for_transform)
        kept = [index for indices, _ in parts for index in indices]
        if not parts:
            return PreprocessResult(None, kept, failed)
        batch = parts[0][1] if len(parts) == 1 else torch.cat([part for _, part in parts])
        return PreprocessResult(batch.to(self.device, non_blocking=True), kept, failed)

    def in_chunks(
        self, images: Sequence[EncodedImage], transform: Callable[[list[torch.Tensor]], Transformed], decode: Decoder | None = None
    ) -> tuple[list[tuple[list[int], Transformed]], dict[int, RequestError]]:
        """`transform` of each chunk's decoded images (in input order), with their input indices, and the
        failures by input index. A chunk's pixels are let go before the next chunk is decoded.
        `decode` is this backend's `decode` unless another is given (the classifier's wants CPU pixels on the CPU)."""
        parts: list[tuple[list[int], Transformed]] = []
        failed: dict[int, RequestError] = {}
        for chunk in budget_slices([self.decoded_pixels(image) for image in images], self.settings.max_batch_pixels):
            decoded, chunk_failed = (decode or self.decode)([images[i] for i in chunk])
            failed.update({chunk[i]: err for i, err in chunk_failed.items()})
            kept = sorted(decoded)
            if kept:
                parts.append(([chunk[i] for i in kept], transform([decoded[i] for i in kept])))
            del decoded  # before the next chunk is decoded
        return parts, failed

    def transform(self, images: list[torch.Tensor]) -> torch.Tensor:
        """Decoded RGB uint8 (3, H, W) images -> the classifier's normalized (N, 3, crop, crop) batch."""
        raise NotImplementedError

    def decode(self, images: Sequence[EncodedImage]) -> tuple[dict[int, torch.Tensor], dict[int, RequestError]]:
        """RGB uint8 (3, H, W) on this backend's device by input index (EXIF orientation applied), and the failures."""
        raise NotImplementedError

    def decode_for_transform(self, images: Sequence[EncodedImage]) -> tuple[dict[int, torch.Tensor], dict[int, RequestError]]:
        """`decode`, where `transform` wants the pixels: on this backend's device unless a backend says otherwise."""
        return self.decode(images)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(device={self.device}, dtype={self.dtype})"


def dct_short_side(settings: PreprocessSettings) -> int:
    """The shorter side a JPEG decoded at a reduced DCT scale keeps: `DCT_OVERSAMPLE` source pixels per pixel of the
    resize (`preprocess.jpeg_dct_scaling`; 0 where it is off)."""
    return DCT_OVERSAMPLE * settings.resize if settings.jpeg_dct_scaling else 0


def pixel_budget_chunks(images: Sequence[EncodedImage], budget: int, min_short_side: int = 0) -> list[list[int]]:
    """Consecutive index groups whose decoded pixels add up to at most `budget` (an image larger than
    the budget goes alone; the probe already refused anything over `max_pixels`)."""
    return budget_slices([decoded_pixels(image, min_short_side) for image in images], budget)


def budget_slices(costs: Sequence[int], budget: int) -> list[list[int]]:
    """Consecutive index groups whose costs add up to at most `budget`; a cost over it goes alone."""
    slices: list[list[int]] = []
    used = budget + 1
    for index, cost in enumerate(costs):
        if used + cost > budget:
            slices.append([])
            used = 0
        slices[-1].append(index)
        used += cost
    return slices
