"""CV-CUDA backend: nvJPEG batch decode, then CV-CUDA operators on the whole variable-size batch.

The decoded images stay on the GPU: they are wrapped (zero copy) as one `cvcuda.ImageBatchVarShape` (`cvcuda.as_images`),
resized in one call (`cvcuda.tvresize`, torchvision semantics: shorter side -> resize, antialias),
then cropped, normalized and turned into NCHW float in one fused call
(`cvcuda.crop_flip_normalize_reformat`). The result is wrapped back into torch without a copy.
`cvcuda` is reached only through `features.optional_module`, the seam unit tests fake.
"""

from __future__ import annotations

from typing import Sequence

import torch

from .. import features
from ..decode import EncodedImage
from .base import PreprocessResult, Preprocessor
from .tensor_ops import Normalizer, resize_crop_stack
from .torch_cuda import decode_on_gpu

_NO_FLIP = 2  # crop_flip_normalize_reformat flips on 0, 1, -1; any other value leaves the image as is


class CvCudaPreprocessor(Preprocessor):
    name = "cvcuda"

    def __init__(self, settings, device: torch.device, dtype: torch.dtype = torch.float32):
        super().__init__(settings, device, dtype)
        self.cvcuda = features.optional_module("cvcuda")
        mean = torch.tensor(settings.mean, dtype=torch.float32, device=device)
        std = torch.tensor(settings.std, dtype=torch.float32, device=device)
        # CV-CUDA normalizes as (x - base) * scale, on 0..255 pixels.
        self._base = self.cvcuda.as_tensor((mean * 255.0).view(1, 1, 1, 3).contiguous(), "NHWC")
        self._scale = self.cvcuda.as_tensor((1.0 / (std * 255.0)).view(1, 1, 1, 3).contiguous(), "NHWC")
        self._interp = _interp(self.cvcuda, settings.interpolation)
        self._fallback_normalize = Normalizer(settings, device, dtype)

    def __call__(self, images: Sequence[EncodedImage]) -> PreprocessResult:
        decoded, failed = decode_on_gpu(images, self.device, features.has_nvjpeg())
        kept = sorted(decoded)
        if not kept:
            return PreprocessResult(None, kept, failed)
        hwc = [decoded[i].permute(1, 2, 0).contiguous() for i in kept]  # CV-CUDA images are interleaved RGB
        batch = self._resize_crop_normalize(hwc)
        return PreprocessResult(batch if self.dtype == torch.float32 else batch.to(self.dtype), kept, failed)

    def _resize_crop_normalize(self, hwc: list[torch.Tensor]) -> torch.Tensor:
        if self.settings.resize < self.settings.crop:  # CV-CUDA would read outside the image; torchvision pads
            return self._fallback_normalize(resize_crop_stack([image.permute(2, 0, 1) for image in hwc], self.settings))
        stream = self._torch_stream()
        varshape = self.cvcuda.as_images(hwc, self.cvcuda.Format.RGB8)  # zero copy; keeps the tensors alive
        resized = self.cvcuda.tvresize(
            varshape, [self.settings.resize], interp=self._interp, antialias=self.settings.antialias, stream=stream
        )
        sizes = [(image.shape[0], image.shape[1]) for image in hwc]
        return self._crop_normalize(resized, sizes, stream)

    def _crop_normalize(self, resized, sizes: list[tuple[int, int]], stream) -> torch.Tensor:
        """Center crop + (x - mean) / std + HWC uint8 -> NCHW float32, one CV-CUDA call for the batch."""
        cv, crop, count = self.cvcuda, self.settings.crop, len(sizes)
        rects = torch.tensor(crop_rects(sizes, self.settings.resize, crop), dtype=torch.int32, device=self.device)
        no_flip = torch.full((count,), _NO_FLIP, dtype=torch.int32, device=self.device)
        out = cv.crop_flip_normalize_reformat(
            resized, (count, 3, crop, crop), cv.Type.F32, cv.TensorLayout("NCHW"),
            cv.as_tensor(rects.view(count, 1, 1, 4), "NHWC"), cv.as_tensor(no_flip, "N"),
            self._base, self._scale, stream=stream,
        )
        return torch.as_tensor(out.cuda(), device=self.device)  # zero copy back to torch

    def _torch_stream(self):
        """Torch's current stream as a CV-CUDA stream: decode, preprocess and model stay in order."""
        if self.device.type != "cuda":
            return None
        return self.cvcuda.as_stream(torch.cuda.current_stream(self.device))


def crop_rects(sizes: list[tuple[int, int]], resize: int, crop: int) -> list[list[int]]:
    """[x, y, w, h] of the center crop of each image after torchvision's shorter-side resize."""
    rects = []
    for height, width in sizes:
        new_h, new_w = resized_hw(height, width, resize)
        rects.append([int(round((new_w - crop) / 2.0)), int(round((new_h - crop) / 2.0)), crop, crop])
    return rects


def resized_hw(height: int, width: int, size: int) -> tuple[int, int]:
    """torchvision's shorter-side resize: the shorter side becomes `size`, the longer one is truncated."""
    if width <= height:
        return int(size * height / width), size
    return size, int(size * width / height)


def _interp(cv, name: str):
    return {"bilinear": cv.Interp.LINEAR, "bicubic": cv.Interp.CUBIC, "nearest": cv.Interp.NEAREST_FLOOR}[name]
