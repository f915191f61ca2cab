"""A stand-in for cvcuda at the calls the cvcuda backend makes, with the behaviour of CV-CUDA 0.19 that matters.

Read from the cvcuda 0.19.0 wheel's stubs, `cvcuda/__init__.pyi` (the same Python API in its cu12 and cu13 builds;
requirements-gpu.txt pins cvcuda-cu13):
- Buffers come in through the CUDA Array Interface (`as_tensor`, `as_images`: "wrap an external buffer");
  a CPU torch tensor has none (torch 2.14.1 `torch/_tensor.py` raises AttributeError), so it is refused.
- The `Stream` docstring: a buffer whose interface is version 2 (no `stream` field, which is what torch
  exports) or says `stream: 1` makes CV-CUDA wait on the legacy default stream; `stream: -1` says the
  producer already synchronized. Each hand-off is recorded in `waits`.
- `tvresize(ImageBatchVarShape, size, interp, antialias, stream=)` resizes the shorter side
  (torchvision semantics); `crop_flip_normalize_reformat(src, out_shape, out_dtype, out_layout, rect,
  flip_code, base, scale, stream=)` returns a new `Tensor`, `crop_flip_normalize_reformat_into(dst, src,
  rect, flip_code, base, scale, stream=)` writes `dst`; `Tensor.cuda()` is the output as a CUDA buffer.
- Output allocation: NVCV allocates tensors with each row padded to 32 bytes (`Tensor(shape, dtype,
  layout, rowalign=0)` takes NVCV's default row alignment), so an fp32 NCHW output whose width is not a
  multiple of 8 comes back as a strided view; this fake returns exactly that view.
- Devices (cvcuda issue #212): outputs are allocated on the current CUDA device even when the stream
  passed in belongs to another one; this fake records the current device at each allocation and refuses
  the mix outright (the real library fails or touches the wrong device).
- `tvresize` honours `interp` (LINEAR, CUBIC, NEAREST_FLOOR) and computes in float, rounding to uint8
  once: not torchvision's fixed-point uint8 kernel, so it differs from the CPU backend by up to a level,
  as the real one does (how much the real CUDA kernel differs is for tests/gpu to measure).
- `crop_flip_normalize_reformat[_into]` checks its arguments as the 0.19 docstring states them: `rect`
  int32 [N, 1, 1, 4] in layout NHWC, `flip_code` int32 [N] in layout N, `base` and `scale` float32
  [1 or N, 1, 1, C] in layout NHWC, the output float32 NCHW [N, C, H, W]; anything else is refused.
- Object cache (CV-CUDA docs, "Object cache"): every output buffer is kept for reuse up to a limit,
  by default half of the GPU's memory (`get_cache_limit_inbytes`, `set_cache_limit_inbytes`), and the
  whole cache is cleared when an allocation would pass it; `current_cache_size_inbytes` says what it holds.
Arithmetic is done with torch on the CPU tensors behind `SimulatedDeviceMemory` (tests/support/fake_cuda.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import torch
import torchvision.transforms.v2.functional as F
from torchvision.transforms import InterpolationMode

ROW_ALIGN_BYTES = 32
GPU_MEMORY_BYTES = 80 * 2**30  # the GPU the fake stands for
INTERPOLATION = {"LINEAR": InterpolationMode.BILINEAR, "CUBIC": InterpolationMode.BICUBIC,
                 "NEAREST_FLOOR": InterpolationMode.NEAREST}


@dataclass
class FakeCvTensor:
    tensor: torch.Tensor
    layout: str | None = None

    def cuda(self) -> torch.Tensor:
        return self.tensor


@dataclass(frozen=True)
class FakeCvStream:
    device: torch.device
    handle: int


def padded_empty(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An NVCV-style allocation: rows padded to ROW_ALIGN_BYTES, returned as the view of the real width."""
    per_row = ROW_ALIGN_BYTES // torch.empty((), dtype=dtype).element_size()
    width = shape[-1]
    padded = -(-width // per_row) * per_row
    return torch.empty((*shape[:-1], padded), dtype=dtype)[..., :width]


class FakeCvcuda:
    Format = SimpleNamespace(RGB8="RGB8")
    Type = SimpleNamespace(F32="F32")
    Interp = SimpleNamespace(LINEAR="LINEAR", CUBIC="CUBIC", NEAREST_FLOOR="NEAREST_FLOOR")
    TensorLayout = staticmethod(lambda name: f"layout:{name}")

    def __init__(self, cuda, device_memory):
        self.cuda, self.device_memory = cuda, device_memory  # FakeCuda, SimulatedDeviceMemory
        self.calls: list[tuple] = []
        self.waits: list[str] = []  # per buffer hand-off: "legacy-default-stream", "none" or "stream <handle>"
        self.allocations: list[int] = []  # the current device at each output allocation
        self.cache_limit = GPU_MEMORY_BYTES // 2
        self.cache_bytes = 0
        self.cache_limit_calls: list[int] = []

    # --- object cache --------------------------------------------------------------------------
    def set_cache_limit_inbytes(self, limit: int) -> None:
        self.cache_limit_calls.append(limit)
        self.cache_limit = limit

    def get_cache_limit_inbytes(self) -> int:
        return self.cache_limit

    def current_cache_size_inbytes(self) -> int:
        return self.cache_bytes

    def _cache(self, tensors: list[torch.Tensor]) -> None:
        size = sum(t.numel() * t.element_size() for t in tensors)
        if self.cache_bytes + size > self.cache_limit:
            self.cache_bytes = 0  # cleared whole
        if size <= self.cache_limit:
            self.cache_bytes += size

    # --- hand-offs -----------------------------------------------------------------------------
    def _read(self, buffer) -> torch.Tensor:
        try:
            interface = buffer.__cuda_array_interface__
        except AttributeError:
            raise TypeError(f"cvcuda: {type(buffer).__name__} is not a CUDA buffer (no __cuda_array_interface__); "
                            "CPU tensors are not accepted") from None
        stream = interface.get("stream") if interface.get("version", 0) >= 3 else None
        self.waits.append("legacy-default-stream" if stream in (None, 1) else "none" if stream == -1 else f"stream {stream}")
        return self.device_memory.tensor(interface)

    def as_tensor(self, buffer, layout=None) -> FakeCvTensor:
        return FakeCvTensor(self._read(buffer), layout)

    def as_images(self, buffers, fmt):
        images = [self._read(buffer) for buffer in buffers]
        assert all(image.ndim == 3 and image.shape[2] == 3 and image.is_contiguous() for image in images), "HWC interleaved"
        self.calls.append(("as_images", len(images), fmt))
        return [image.permute(2, 0, 1) for image in images]

    def as_stream(self, torch_stream) -> FakeCvStream:
        return FakeCvStream(torch_stream.device, torch_stream.cuda_stream)

    # --- operators -----------------------------------------------------------------------------
    def _launch(self, stream: FakeCvStream | None, allocates: bool = True) -> None:
        current = self.cuda.current_device()
        if allocates:
            self.allocations.append(current)
        if stream is not None and stream.device.index != current:
            raise RuntimeError(f"cvcuda: launched on a stream of {stream.device} while cuda:{current} is current "
                               "(outputs go to the current device: cvcuda issue #212); make the worker's GPU current first")

    def tvresize(self, batch, size, interp, max_size=None, antialias=True, *, stream=None):
        self._launch(stream)
        self.calls.append(("tvresize", size, interp, antialias))
        mode = INTERPOLATION[interp]
        out = [F.resize(image.float(), size, interpolation=mode, antialias=antialias and mode != InterpolationMode.NEAREST)
               .round().clamp(0, 255).to(torch.uint8) for image in batch]
        self._cache(out)
        return out

    def crop_flip_normalize_reformat(self, src, out_shape, out_dtype, out_layout, rect, flip_code, base, scale, *, stream=None):
        _check_crop_arguments(len(src), rect, flip_code, base, scale)
        self._launch(stream)
        self.calls.append(("cfnr", out_shape, out_dtype, out_layout, flip_code.tensor.tolist()))
        out = padded_empty(out_shape, torch.float32)
        out.copy_(self._crop_normalize(src, rect, base, scale))
        return FakeCvTensor(out, out_layout)

    def crop_flip_normalize_reformat_into(self, dst, src, rect, flip_code, base, scale, *, stream=None):
        _check_crop_arguments(len(src), rect, flip_code, base, scale)
        _check(dst, torch.float32, (len(src), base.tensor.shape[-1], None, None), "NCHW", "dst")
        self._launch(stream, allocates=False)
        self.calls.append(("cfnr_into", tuple(dst.tensor.shape), dst.tensor.dtype, dst.layout, flip_code.tensor.tolist()))
        dst.tensor.copy_(self._crop_normalize(src, rect, base, scale))
        return dst

    @staticmethod
    def _crop_normalize(src, rect, base, scale) -> torch.Tensor:
        mean, factor = base.tensor.view(3, 1, 1), scale.tensor.view(3, 1, 1)
        crops = [(image[:, y : y + h, x : x + w].float() - mean) * factor
                 for image, (x, y, w, h) in zip(src, rect.tensor[:, 0, 0, :].tolist())]
        return torch.stack(crops)


def _check(tensor: FakeCvTensor, dtype: torch.dtype, shape: tuple, layout: str, name: str) -> None:
    """CV-CUDA's refusal of a tensor of another dtype, rank, size (None: any) or layout than the operator's."""
    actual = tuple(tensor.tensor.shape)
    fits = len(actual) == len(shape) and all(want is None or want == got for want, got in zip(shape, actual))
    if tensor.tensor.dtype != dtype or not fits or tensor.layout != layout:
        raise ValueError(f"cvcuda: {name} must be {dtype} {shape} in layout {layout}, "
                         f"got {tensor.tensor.dtype} {actual} in layout {tensor.layout}")


def _check_crop_arguments(count: int, rect, flip_code, base, scale) -> None:
    _check(rect, torch.int32, (count, 1, 1, 4), "NHWC", "rect")
    _check(flip_code, torch.int32, (count,), "N", "flip_code")
    channels = base.tensor.shape[-1]
    for name, tensor in (("base", base), ("scale", scale)):
        batch = tensor.tensor.shape[0] if tensor.tensor.ndim == 4 and tensor.tensor.shape[0] in (1, count) else -1
        _check(tensor, torch.float32, (batch, 1, 1, channels), "NHWC", name)
