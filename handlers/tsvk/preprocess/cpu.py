"""CPU backend: libjpeg-turbo / Pillow decode, then batched tensor resize, crop and normalize.

Large JPEGs are decoded at a reduced DCT scale that still leaves the resize at least
`DCT_OVERSAMPLE` source pixels per output pixel (`preprocess.jpeg_dct_scaling`). A batch is decoded
in chunks whose decoded pixels stay within `preprocess.max_batch_pixels`, so eight large PNGs never
sit in memory at full size together; batches of ordinary photos are one chunk.
"""

from __future__ import annotations

from typing import Sequence

import torch

from ..decode import EncodedImage, decode_rgb, decoded_pixels
from ..errors import RequestError
from .base import PreprocessResult, Preprocessor
from .tensor_ops import Normalizer, resize_crop_stack

DCT_OVERSAMPLE = 2  # 1/4 scale for a 12 MP photo and resize 256: 1008x756 left for the antialiased resize


class CpuPreprocessor(Preprocessor):
    name = "cpu"

    def __init__(self, settings, device: torch.device = torch.device("cpu"), dtype: torch.dtype = torch.float32):
        super().__init__(settings, device, dtype)
        self._normalize = Normalizer(settings, torch.device("cpu"), dtype)  # on the CPU, then one copy
        self.min_short_side = DCT_OVERSAMPLE * settings.resize if settings.jpeg_dct_scaling else 0

    def __call__(self, images: Sequence[EncodedImage]) -> PreprocessResult:
        chunks = pixel_budget_chunks(images, self.settings.max_batch_pixels, self.min_short_side)
        parts = [self._chunk([images[i] for i in chunk]) for chunk in chunks]
        batches = [batch for batch, _, _ in parts if batch is not None]
        kept = [chunk[i] for chunk, (_, part_kept, _) in zip(chunks, parts) for i in part_kept]
        failed = {chunk[i]: err for chunk, (_, _, part_failed) in zip(chunks, parts) for i, err in part_failed.items()}
        if not batches:
            return PreprocessResult(None, kept, failed)
        batch = batches[0] if len(batches) == 1 else torch.cat(batches)
        return PreprocessResult(batch.to(self.device, non_blocking=True), kept, failed)

    def decode(self, images: Sequence[EncodedImage]) -> tuple[dict[int, torch.Tensor], dict[int, RequestError]]:
        decoded, kept, failed = decode_each(images, self.min_short_side)
        return {index: tensor.to(self.device) for index, tensor in zip(kept, decoded)}, failed

    def _chunk(self, images: Sequence[EncodedImage]) -> tuple[torch.Tensor | None, list[int], dict[int, RequestError]]:
        decoded, kept, failed = decode_each(images, self.min_short_side)
        if not decoded:
            return None, kept, failed
        return self._normalize(resize_crop_stack(decoded, self.settings)), kept, failed


def pixel_budget_chunks(images: Sequence[EncodedImage], budget: int, min_short_side: int = 0) -> list[list[int]]:
    """Consecutive index groups whose decoded pixels add up to at most `budget` (an image larger than
    the budget goes alone; the probe already refused anything over `max_pixels`)."""
    chunks: list[list[int]] = []
    used = budget + 1
    for index, image in enumerate(images):
        cost = decoded_pixels(image, min_short_side)
        if used + cost > budget:
            chunks.append([])
            used = 0
        chunks[-1].append(index)
        used += cost
    return chunks


def decode_each(
    images: Sequence[EncodedImage], min_short_side: int = 0
) -> tuple[list[torch.Tensor], list[int], dict[int, RequestError]]:
    """Decode on the CPU one by one, so a corrupt image fails alone."""
    decoded: list[torch.Tensor] = []
    kept: list[int] = []
    failed: dict[int, RequestError] = {}
    for index, image in enumerate(images):
        try:
            decoded.append(decode_rgb(image, min_short_side))
            kept.append(index)
        except RequestError as err:
            failed[index] = err.detached()
    return decoded, kept, failed
