"""Decoding and batch preprocessing: encoded images -> one normalized NCHW tensor on the model's device.

`decode.py` probes and decodes (bounded: pixels, JPEG scans); the backends are `cpu` (libjpeg-turbo +
batched torch ops), `cuda` (nvJPEG + torch ops on the GPU) and `cvcuda` (nvJPEG + CV-CUDA operators).
`build_preprocessor` picks one; all follow the archive's resize, crop, mean, std, interpolation and
antialias settings. `__all__` is what tools/ may import from this room.
"""

from .base import PreprocessResult, Preprocessor
from .cpu import DCT_OVERSAMPLE, CpuPreprocessor
from .decode import EncodedImage, decode_rgb, probe
from .factory import BackendChoice, build_preprocessor, choose_backend
from .tensor_ops import INTERPOLATION_MODES, Normalizer, resize_crop_stack

__all__ = ["DCT_OVERSAMPLE", "INTERPOLATION_MODES", "BackendChoice", "CpuPreprocessor", "EncodedImage", "Normalizer",
           "PreprocessResult", "Preprocessor", "build_preprocessor", "choose_backend", "decode_rgb", "probe",
           "resize_crop_stack"]
