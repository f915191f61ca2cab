"""What this worker can use, probed once: CUDA, nvJPEG, CV-CUDA, Torch-TensorRT, OpenVINO, the HEIC and AVIF
decoders and libspng's PNG decoder.

Every optional library is imported here and nowhere else, so the rest of the package asks
`has_cvcuda()` instead of wrapping imports in try/except, and tests fake one seam: `optional_module`.
An import can fail with more than ImportError (cvcuda and torch_tensorrt raise OSError or
RuntimeError when the CUDA driver is missing), so any exception counts as "not available", and
the reason is kept for the log line and for error messages.
"""

from __future__ import annotations

import functools
import importlib
from types import ModuleType

_INSTALL_HINTS = {
    "cvcuda": "pip install cvcuda-cu13 (the CUDA 13 build, for torch 2.14.1+cu130; requirements-gpu.txt pins it)",
    "torch_tensorrt": "pip install torch-tensorrt==2.14.0 (requirements-gpu.txt pins it and its tensorrt-cu13)",
    "openvino": "pip install openvino (tsvk's requirements.txt pins the tested version)",
    "pi_heif": "pip install pi-heif (libheif and libde265, LGPL, without the GPL x265 encoder; tsvk's requirements.txt pins it)",
    "pyspng": "pip install pyspng (libspng, BSD; tsvk's requirements.txt pins it)",
}
AVIF_HINT = "pip install 'pillow>=11.3' (Pillow's own wheels decode AVIF with libavif and dav1d)"


@functools.lru_cache(maxsize=None)
def _probe_module(name: str) -> tuple[ModuleType | None, str]:
    try:
        return importlib.import_module(name), ""
    except Exception as err:  # noqa: BLE001 - a broken GPU library must not kill the worker
        return None, f"{type(err).__name__}: {err}"


def optional_module(name: str) -> ModuleType:
    """The imported module, or ImportError naming why it is unavailable and how to install it."""
    module, reason = _probe_module(name)
    if module is None:
        raise ImportError(f"{name} is not usable in this worker ({reason}); install it with: {install_hint(name)}")
    return module


def install_hint(name: str) -> str:
    """How to install the optional module `name`."""
    return _INSTALL_HINTS.get(name, f"pip install {name}")


def unavailable_reason(name: str) -> str:
    """Why `name` cannot be imported ('' when it can)."""
    return _probe_module(name)[1]


@functools.lru_cache(maxsize=None)
def has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def has_nvjpeg(device=None) -> bool:
    """torchvision decodes JPEG on the GPU only when it was built with nvJPEG.

    Probed on `device` (a torch.device; default: the current CUDA device), so a worker on GPU 1 does
    not create a CUDA context on GPU 0 just to answer this."""
    if not has_cuda() or (device is not None and device.type != "cuda"):
        return False
    import torch

    index = device.index if device is not None and device.index is not None else torch.cuda.current_device()
    return _has_gpu_jpeg_decoder(index)


@functools.lru_cache(maxsize=None)
def _has_gpu_jpeg_decoder(index: int) -> bool:
    """Decode one tiny JPEG on GPU `index`: CPU-only torchvision builds register the op but cannot run it."""
    import torch
    from torchvision.io import decode_jpeg, encode_jpeg

    try:
        tiny = encode_jpeg(torch.zeros(3, 8, 8, dtype=torch.uint8))
        return decode_jpeg(tiny, device=torch.device("cuda", index)).is_cuda
    except Exception:  # noqa: BLE001 - any failure means: decode JPEG on the CPU
        return False


def has_cvcuda() -> bool:
    return has_cuda() and _probe_module("cvcuda")[0] is not None


def has_torch_tensorrt() -> bool:
    return _probe_module("torch_tensorrt")[0] is not None


def has_openvino() -> bool:
    """OpenVINO runs `openvino` artifacts on the CPU; only archives of that format need it."""
    return _probe_module("openvino")[0] is not None


def heif_decoder() -> ModuleType | None:
    """pi-heif, which decodes HEIC (HEVC in a HEIF container, what iPhones write) through libheif, where it imports;
    its wheels carry no encoder."""
    return _probe_module("pi_heif")[0]


def has_heif() -> bool:
    return heif_decoder() is not None


def png_decoder() -> ModuleType | None:
    """pyspng, which decodes 8-bit RGB and RGBA PNGs in half Pillow's time (preprocess/png.py), where it imports."""
    return _probe_module("pyspng")[0]


@functools.lru_cache(maxsize=None)
def has_avif() -> bool:
    """Pillow decodes AVIF itself where its build has libavif (its wheels since 11.3)."""
    from PIL import features as pillow_features

    return bool(pillow_features.check("avif"))


PROBES = {"cuda": lambda device: has_cuda(), "nvjpeg": has_nvjpeg, "cvcuda": lambda device: has_cvcuda(),
          "torch_tensorrt": lambda device: has_torch_tensorrt(), "openvino": lambda device: has_openvino(),
          "heif": lambda device: has_heif(), "avif": lambda device: has_avif(), "spng": lambda device: png_decoder() is not None}


def describe(names: tuple[str, ...] = tuple(PROBES), device=None) -> dict[str, bool]:
    """Several probes at once, for a log line (importing torch_tensorrt takes seconds: name only what you need).

    `device` is the worker's device, for the probes that depend on it (nvjpeg)."""
    return {name: PROBES[name](device) for name in names}


def reset_cache() -> None:
    """Forget every probe result (tests that fake a module call this)."""
    _probe_module.cache_clear()
    has_cuda.cache_clear()
    has_avif.cache_clear()
    _has_gpu_jpeg_decoder.cache_clear()
