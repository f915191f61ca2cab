"""What every preprocessing backend takes and returns.

A backend turns the encoded images of one batch into one normalized NCHW tensor on the model's
device. Images that fail to decode are reported per index instead of failing the batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch

from ..decode import EncodedImage
from ..errors import RequestError
from ..settings import PreprocessSettings


@dataclass
class PreprocessResult:
    """`batch[i]` is the image at input position `kept[i]`; `failed` maps input positions to errors."""

    batch: torch.Tensor | None
    kept: list[int]
    failed: dict[int, RequestError] = field(default_factory=dict)


class Preprocessor:
    """Base class: subclasses set `name` and implement `__call__` (the classifier's whole transform) and
    `decode` (pixels only, for tasks whose transform is their own: detection, segmentation)."""

    name = "base"

    def __init__(self, settings: PreprocessSettings, device: torch.device, dtype: torch.dtype = torch.float32):
        self.settings = settings
        self.device = device
        self.dtype = dtype

    def __call__(self, images: Sequence[EncodedImage]) -> PreprocessResult:
        raise NotImplementedError

    def decode(self, images: Sequence[EncodedImage]) -> tuple[dict[int, torch.Tensor], dict[int, RequestError]]:
        """RGB uint8 (3, H, W) on this backend's device by input index (EXIF orientation applied), and the failures."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(device={self.device}, dtype={self.dtype})"
