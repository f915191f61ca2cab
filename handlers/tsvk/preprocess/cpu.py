"""CPU backend: libjpeg-turbo / Pillow decode, then batched tensor resize, crop and normalize."""

from __future__ import annotations

from typing import Sequence

import torch

from ..decode import EncodedImage, decode_rgb
from ..errors import RequestError
from .base import PreprocessResult, Preprocessor
from .tensor_ops import Normalizer, resize_crop_stack


class CpuPreprocessor(Preprocessor):
    name = "cpu"

    def __init__(self, settings, device: torch.device = torch.device("cpu"), dtype: torch.dtype = torch.float32):
        super().__init__(settings, device, dtype)
        self._normalize = Normalizer(settings, torch.device("cpu"), dtype)  # on the CPU, then one copy

    def __call__(self, images: Sequence[EncodedImage]) -> PreprocessResult:
        decoded, kept, failed = decode_each(images)
        if not decoded:
            return PreprocessResult(None, kept, failed)
        batch = self._normalize(resize_crop_stack(decoded, self.settings))
        return PreprocessResult(batch.to(self.device, non_blocking=True), kept, failed)


def decode_each(images: Sequence[EncodedImage]) -> tuple[list[torch.Tensor], list[int], dict[int, RequestError]]:
    """Decode on the CPU one by one, so a corrupt image fails alone."""
    decoded: list[torch.Tensor] = []
    kept: list[int] = []
    failed: dict[int, RequestError] = {}
    for index, image in enumerate(images):
        try:
            decoded.append(decode_rgb(image))
            kept.append(index)
        except RequestError as err:
            failed[index] = err
    return decoded, kept, failed
