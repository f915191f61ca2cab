"""CUDA backend: nvJPEG batch decode, then the same tensor ops as the CPU backend, on the GPU.

JPEGs of the batch are decoded in one nvJPEG call; other formats, and JPEGs that do not end with
their End Of Image marker (truncated uploads: whether nvJPEG refuses them is not documented), are
decoded on the CPU and uploaded. If the batched decode rejects the batch (one corrupt JPEG fails the
whole call), each JPEG is retried alone so only the corrupt one fails. A batch is decoded in chunks
within `preprocess.max_batch_pixels` (base.py), so GPU memory holds one chunk's pixels at a time.
"""

from __future__ import annotations

from typing import Sequence

import torch

from .. import features
from ..decode import EncodedImage, apply_orientation, decode_rgb, jpeg_bytes_tensor, jpeg_is_complete
from ..errors import BadRequest, RequestError
from .base import Preprocessor
from .tensor_ops import Normalizer, resize_crop_stack


class CudaPreprocessor(Preprocessor):
    name = "cuda"

    def __init__(self, settings, device: torch.device, dtype: torch.dtype = torch.float32):
        super().__init__(settings, device, dtype)
        self._normalize = Normalizer(settings, device, dtype)

    def transform(self, images: list[torch.Tensor]) -> torch.Tensor:
        return self._normalize(resize_crop_stack(images, self.settings))

    def decode(self, images: Sequence[EncodedImage]) -> tuple[dict[int, torch.Tensor], dict[int, RequestError]]:
        return decode_on_gpu(images, self.device, features.has_nvjpeg(self.device))


def decode_on_gpu(
    images: Sequence[EncodedImage], device: torch.device, nvjpeg: bool = True
) -> tuple[dict[int, torch.Tensor], dict[int, RequestError]]:
    """RGB uint8 (3, H, W) CUDA tensors by input index, plus the indices that failed to decode.

    Without nvJPEG (a torchvision built without it) every image is decoded on the CPU and uploaded.
    """
    decoded: dict[int, torch.Tensor] = {}
    failed: dict[int, RequestError] = {}
    jpegs = [i for i, image in enumerate(images) if nvjpeg and _for_nvjpeg(image)]
    for index, tensor in _nvjpeg_batch([images[i] for i in jpegs], jpegs, device, failed).items():
        decoded[index] = apply_orientation(tensor, images[index].orientation)
    for index, image in enumerate(images):
        if index in decoded or index in failed:
            continue
        try:
            decoded[index] = decode_rgb(image).to(device, non_blocking=True)
        except RequestError as err:
            failed[index] = err.detached()
    return decoded, failed


def _for_nvjpeg(image: EncodedImage) -> bool:
    """JPEGs nvJPEG turns into RGB itself, and only whole ones (a truncated one goes to the CPU decoder)."""
    return image.is_jpeg and image.mode in ("RGB", "L") and jpeg_is_complete(image.data)


def _nvjpeg_batch(
    images: list[EncodedImage], indices: list[int], device: torch.device, failed: dict[int, RequestError]
) -> dict[int, torch.Tensor]:
    if not images:
        return {}
    try:
        return dict(zip(indices, nvjpeg_decode([image.data for image in images], device)))
    except Exception:  # noqa: BLE001 - one bad JPEG fails the whole call: find it by retrying alone
        pass
    decoded: dict[int, torch.Tensor] = {}
    for index, image in zip(indices, images):
        try:
            decoded[index] = nvjpeg_decode([image.data], device)[0]
        except Exception as err:  # noqa: BLE001
            failed[index] = BadRequest(f"cannot decode the JPEG image ({image.width}x{image.height}): {err}")
    return decoded


def nvjpeg_decode(payloads: list[bytes], device: torch.device) -> list[torch.Tensor]:
    """Batched GPU JPEG decode through torchvision (nvJPEG); RGB uint8 (3, H, W) each."""
    from torchvision.io import ImageReadMode, decode_jpeg

    return decode_jpeg([jpeg_bytes_tensor(p) for p in payloads], mode=ImageReadMode.RGB, device=device)
