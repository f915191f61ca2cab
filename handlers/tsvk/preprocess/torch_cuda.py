"""CUDA backend: nvJPEG batch decode, then the same tensor ops as the CPU backend, on the GPU.

JPEGs of the batch are decoded in one nvJPEG call; other formats, and JPEGs that do not end with
their End Of Image marker (truncated uploads: whether nvJPEG refuses them is not documented), are
decoded on the CPU and uploaded. If the batched decode rejects the batch (one JPEG nvJPEG refuses fails
the whole call), each JPEG is retried alone, and one nvJPEG still refuses goes to the CPU decoder:
nvJPEG refuses JPEGs libjpeg-turbo decodes (chroma subsampling it has no name for, arithmetic coding),
so only a JPEG the CPU decoder refuses too is a 400, as on the CPU backend. A JPEG whose data is
corrupt but complete decodes to whatever pixels the decoder makes of it on either side (libjpeg-turbo
warns and goes on; nvJPEG's hardware decoder may not notice): the same answer as the CPU backend's.
A JPEG larger than `preprocess.max_pixels` (a 48-108 MP phone photo) is decoded on the CPU at a reduced DCT scale
instead, as the CPU backend decodes it, and uploaded: nvJPEG has no scaled decode, and the probe admitted it by its
pixels at that scale. A batch is decoded in chunks within `preprocess.max_batch_pixels` (base.py), so GPU memory holds
one chunk's pixels at a time.
"""

from __future__ import annotations

import logging
from typing import Sequence

import torch

from ..common import features
from .decode import EncodedImage, apply_orientation, decode_rgb, decoded_pixels, jpeg_bytes_tensor, jpeg_is_complete
from ..common.errors import RequestError
from .base import Preprocessor
from .tensor_ops import Normalizer, resize_crop_stack

log = logging.getLogger(__name__)


class GpuDecoding(Preprocessor):
    """Decoding for the GPU backends: nvJPEG where it can, oversized JPEGs scaled on the CPU, the rest on the CPU."""

    def decode(self, images: Sequence[EncodedImage]) -> tuple[dict[int, torch.Tensor], dict[int, RequestError]]:
        return decode_on_gpu(images, self.device, features.has_nvjpeg(self.device), self.oversize)

    @property
    def oversize(self) -> "Oversize":
        return Oversize(self.settings.max_pixels, self.min_short_side)

    def decoded_pixels(self, image: EncodedImage) -> int:
        return self.oversize.decoded_pixels(image)


class CudaPreprocessor(GpuDecoding):
    name = "cuda"

    def __init__(self, settings, device: torch.device, dtype: torch.dtype = torch.float32):
        super().__init__(settings, device, dtype)
        self._normalize = Normalizer(settings, device, dtype)

    def transform(self, images: list[torch.Tensor]) -> torch.Tensor:
        return self._normalize(resize_crop_stack(images, self.settings))


class Oversize:
    """JPEGs over `max_pixels` at full size, which a GPU backend decodes on the CPU at a reduced DCT scale."""

    def __init__(self, max_pixels: int = 0, min_short_side: int = 0):
        self.max_pixels = max_pixels
        self.min_short_side = min_short_side

    def holds(self, image: EncodedImage) -> bool:
        return bool(self.max_pixels) and image.is_jpeg and image.width * image.height > self.max_pixels

    def decoded_pixels(self, image: EncodedImage) -> int:
        return decoded_pixels(image, self.min_short_side) if self.holds(image) else image.width * image.height


def decode_on_gpu(
    images: Sequence[EncodedImage], device: torch.device, nvjpeg: bool = True, oversize: Oversize = Oversize()
) -> tuple[dict[int, torch.Tensor], dict[int, RequestError]]:
    """RGB uint8 (3, H, W) CUDA tensors by input index, plus the indices that failed to decode.

    Without nvJPEG (a torchvision built without it) every image is decoded on the CPU and uploaded, and
    so is each JPEG nvJPEG refuses; an `oversize` JPEG is decoded on the CPU at its reduced DCT scale.
    """
    decoded: dict[int, torch.Tensor] = {}
    failed: dict[int, RequestError] = {}
    jpegs = [i for i, image in enumerate(images) if nvjpeg and _for_nvjpeg(image) and not oversize.holds(image)]
    for index, tensor in _nvjpeg_batch([images[i] for i in jpegs], jpegs, device).items():
        decoded[index] = apply_orientation(tensor, images[index].orientation)
    for index, image in enumerate(images):
        if index in decoded or index in failed:
            continue
        try:
            scale_to = oversize.min_short_side if oversize.holds(image) else 0
            decoded[index] = decode_rgb(image, scale_to).to(device, non_blocking=True)
        except RequestError as err:
            failed[index] = err.detached()
    return decoded, failed


def _for_nvjpeg(image: EncodedImage) -> bool:
    """JPEGs nvJPEG turns into RGB itself, and only whole ones (a truncated one goes to the CPU decoder)."""
    return image.is_jpeg and image.mode in ("RGB", "L") and jpeg_is_complete(image.data)


def _nvjpeg_batch(images: list[EncodedImage], indices: list[int], device: torch.device) -> dict[int, torch.Tensor]:
    """What nvJPEG decodes, by input index; the JPEGs it refuses are left out (the CPU decoder gets them)."""
    if not images:
        return {}
    try:
        return dict(zip(indices, nvjpeg_decode([image.data for image in images], device)))
    except Exception:  # noqa: BLE001 - one refused JPEG fails the whole call: find it by retrying alone
        pass
    decoded: dict[int, torch.Tensor] = {}
    for index, image in zip(indices, images):
        try:
            decoded[index] = nvjpeg_decode([image.data], device)[0]
        except Exception as err:  # noqa: BLE001 - refused here is not yet invalid: the CPU decoder decides
            log.info("nvJPEG refused a %dx%d JPEG (%s); decoding it on the CPU", image.width, image.height,
                     str(err).splitlines()[0][:200] if str(err) else type(err).__name__)
    return decoded


def nvjpeg_decode(payloads: list[bytes], device: torch.device) -> list[torch.Tensor]:
    """Batched GPU JPEG decode through torchvision (nvJPEG); RGB uint8 (3, H, W) each.

    The caller's stream is synchronized first. torchvision 0.29 (`decode_jpegs_cuda.cpp`) allocates the
    outputs on the caller's stream but writes them on a private stream that does not wait for it
    (torchvision pull request #9606): the caching allocator may hand out memory that kernels still queued
    on the caller's stream are about to read, and nvJPEG would overwrite it first. Once the caller's
    stream is idle no queued kernel reads anything; torchvision itself makes the caller's stream wait for
    the decode (an event), so the outputs are safe to use on it afterwards."""
    from torchvision.io import ImageReadMode, decode_jpeg

    torch.cuda.current_stream(device).synchronize()
    return decode_jpeg([jpeg_bytes_tensor(p) for p in payloads], mode=ImageReadMode.RGB, device=device)
