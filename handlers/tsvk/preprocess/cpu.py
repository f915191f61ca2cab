"""CPU backend: libjpeg-turbo / Pillow decode, then batched tensor resize, crop and normalize.

Large JPEGs are decoded at a reduced DCT scale that still leaves the resize at least
`DCT_OVERSAMPLE` source pixels per output pixel (`preprocess.jpeg_dct_scaling`).
"""

from __future__ import annotations

from typing import Sequence

import torch

from ..decode import EncodedImage, decode_rgb
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
        decoded, kept, failed = decode_each(images, self.min_short_side)
        if not decoded:
            return PreprocessResult(None, kept, failed)
        batch = self._normalize(resize_crop_stack(decoded, self.settings))
        return PreprocessResult(batch.to(self.device, non_blocking=True), kept, failed)


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
            failed[index] = err
    return decoded, kept, failed
