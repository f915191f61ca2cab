"""CPU backend: libjpeg-turbo / Pillow decode, then batched tensor resize, crop and normalize.

Large JPEGs are decoded at a reduced DCT scale that still leaves the resize at least
`DCT_OVERSAMPLE` source pixels per output pixel (`preprocess.jpeg_dct_scaling`). Batches are decoded
in chunks within `preprocess.max_batch_pixels` (base.py).
"""

from __future__ import annotations

from typing import Sequence

import torch

from .decode import EncodedImage, decode_rgb
from ..common.errors import RequestError
from .base import DCT_OVERSAMPLE, Preprocessor, pixel_budget_chunks
from .tensor_ops import Normalizer, resize_crop_stack

__all__ = ["CpuPreprocessor", "DCT_OVERSAMPLE", "decode_each", "pixel_budget_chunks"]


class CpuPreprocessor(Preprocessor):
    name = "cpu"

    def __init__(self, settings, device: torch.device = torch.device("cpu"), dtype: torch.dtype = torch.float32):
        super().__init__(settings, device, dtype)
        self._normalize = Normalizer(settings, torch.device("cpu"), dtype)  # on the CPU, then one copy

    def decode(self, images: Sequence[EncodedImage]) -> tuple[dict[int, torch.Tensor], dict[int, RequestError]]:
        decoded, failed = self.decode_for_transform(images)
        return {index: tensor.to(self.device) for index, tensor in decoded.items()}, failed

    def decode_for_transform(self, images: Sequence[EncodedImage]) -> tuple[dict[int, torch.Tensor], dict[int, RequestError]]:
        """On the CPU: the classifier's transform runs there, and only its small batch is copied to the device."""
        decoded, kept, failed = decode_each(images, self.min_short_side)
        return dict(zip(kept, decoded)), failed

    def transform(self, images: list[torch.Tensor]) -> torch.Tensor:
        return self._normalize(resize_crop_stack(images, self.settings))


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
