"""CV-CUDA backend: nvJPEG batch decode, then CV-CUDA operators on the whole variable-size batch.

The decoded images stay on the GPU: they are wrapped (zero copy) as one `cvcuda.ImageBatchVarShape`
(`cvcuda.as_images`), resized in one call (`cvcuda.tvresize`, torchvision semantics: shorter side ->
resize, antialias), then cropped, normalized and turned into NCHW float in one fused call written
straight into a tensor torch allocated (`cvcuda.crop_flip_normalize_reformat_into`).
Every CV-CUDA call runs on torch's current stream, and every tensor is handed over as "already
ordered" (`SameStream`), so nothing waits on the legacy default stream.
`cvcuda` is reached only through `features.optional_module`, the seam unit tests fake. A batch is
decoded and transformed in chunks within `preprocess.max_batch_pixels` (base.py).
"""

from __future__ import annotations


import torch

from ..common import features
from .tensor_ops import Normalizer, resize_crop_stack
from .torch_cuda import GpuDecoding

_NO_FLIP = 2  # crop_flip_normalize_reformat flips on 0, 1, -1; any other value leaves the image as is
MIB = 1 << 20
_cache_limited: set[int] = set()  # the CUDA devices whose CV-CUDA cache limit this process has set


class SameStream:
    """A torch CUDA tensor's CUDA Array Interface (v3) saying: read me on the stream that wrote me.

    torch exports version 2, without a `stream` field (torch/_tensor.py), and CV-CUDA 0.19 answers
    such a buffer by waiting on the legacy default stream first (`cvcuda.Stream` docstring), on every
    call. Here every CV-CUDA operator is launched on torch's current stream, the one that wrote the
    tensor, so stream order already makes the data ready: `stream: -1` is CV-CUDA's documented way to
    say so. Holding the tensor keeps its memory alive for as long as CV-CUDA holds this object.
    """

    __slots__ = ("tensor",)

    def __init__(self, tensor: torch.Tensor):
        self.tensor = tensor

    @property
    def __cuda_array_interface__(self) -> dict:
        return {**self.tensor.__cuda_array_interface__, "version": 3, "stream": -1}


class CvCudaPreprocessor(GpuDecoding):
    """Decodes as the cuda backend does (detection and segmentation transform with torch ops on the GPU: CV-CUDA
    adds nothing to nvJPEG there); the classifier's resize, crop and normalize are CV-CUDA's."""

    name = "cvcuda"

    def __init__(self, settings, device: torch.device, dtype: torch.dtype = torch.float32):
        super().__init__(settings, device, dtype)
        self.cvcuda = features.optional_module("cvcuda")
        limit_cache(self.cvcuda, settings.cvcuda_cache_mb, device)
        mean = torch.tensor(settings.mean, dtype=torch.float32, device=device)
        std = torch.tensor(settings.std, dtype=torch.float32, device=device)
        # CV-CUDA normalizes as (x - base) * scale, on 0..255 pixels.
        base, scale = (mean * 255.0).view(1, 1, 1, 3).contiguous(), (1.0 / (std * 255.0)).view(1, 1, 1, 3).contiguous()
        torch.cuda.current_stream(device).synchronize()  # ready on any stream later calls may run on
        self._base, self._scale = self._wrap(base, "NHWC"), self._wrap(scale, "NHWC")
        self._interp = _interp(self.cvcuda, settings.interpolation)
        self._fallback_normalize = Normalizer(settings, device, dtype)

    def transform(self, images: list[torch.Tensor]) -> torch.Tensor:
        hwc = [image.permute(1, 2, 0).contiguous() for image in images]  # CV-CUDA images are interleaved RGB
        batch = self._resize_crop_normalize(hwc)
        return batch if self.dtype == torch.float32 else batch.to(self.dtype)


    def _wrap(self, tensor: torch.Tensor, layout: str):
        return self.cvcuda.as_tensor(SameStream(tensor), layout)

    def _resize_crop_normalize(self, hwc: list[torch.Tensor]) -> torch.Tensor:
        if self.settings.resize < self.settings.crop:  # CV-CUDA would read outside the image; torchvision pads
            return self._fallback_normalize(resize_crop_stack([image.permute(2, 0, 1) for image in hwc], self.settings))
        stream = self.cvcuda.as_stream(torch.cuda.current_stream(self.device))
        varshape = self.cvcuda.as_images([SameStream(image) for image in hwc], self.cvcuda.Format.RGB8)
        resized = self.cvcuda.tvresize(
            varshape, [self.settings.resize], interp=self._interp, antialias=self.settings.antialias, stream=stream
        )
        sizes = [(image.shape[0], image.shape[1]) for image in hwc]
        return self._crop_normalize(resized, sizes, stream)

    def _crop_normalize(self, resized, sizes: list[tuple[int, int]], stream) -> torch.Tensor:
        """Center crop + (x - mean) / std + HWC uint8 -> NCHW float32, one CV-CUDA call for the batch.

        The output is a contiguous tensor torch allocates on the worker's device and CV-CUDA fills in
        place. CV-CUDA's own output would pad every row to 32 bytes, a strided view for crops that are
        not a multiple of 8 (inception_v3 299, efficientnet_b3 300, ViT-H 518), and AOTInductor does not
        check input strides: it would read the padding as pixels.
        """
        crop, count = self.settings.crop, len(sizes)
        rects = torch.tensor(crop_rects(sizes, self.settings.resize, crop), dtype=torch.int32, device=self.device)
        no_flip = torch.full((count,), _NO_FLIP, dtype=torch.int32, device=self.device)
        out = torch.empty((count, 3, crop, crop), dtype=torch.float32, device=self.device)
        self.cvcuda.crop_flip_normalize_reformat_into(
            self._wrap(out, "NCHW"), resized, self._wrap(rects.view(count, 1, 1, 4), "NHWC"), self._wrap(no_flip, "N"),
            self._base, self._scale, stream=stream,
        )
        return out


def limit_cache(cv, megabytes: int, device: torch.device) -> None:
    """Cap CV-CUDA's object cache on `device` once per process (`preprocess.cvcuda_cache_mb`).

    CV-CUDA keeps every output buffer it allocated for reuse, up to a limit that defaults to half of the
    GPU's memory, per process, and clears the whole cache when it is reached (CV-CUDA docs, "Object
    cache"); resize outputs take a new shape with nearly every batch, so without a lower limit each worker
    grows towards half the GPU. `set_cache_limit_inbytes` applies to the current CUDA device, which the
    worker made its own before building this backend."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index in _cache_limited:
        return
    cv.set_cache_limit_inbytes(megabytes * MIB)
    _cache_limited.add(index)


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
