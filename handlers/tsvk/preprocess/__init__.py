"""Decoding and batch preprocessing: encoded images -> one normalized NCHW tensor on the model's device.

`decode.py` probes and decodes (bounded: pixels, JPEG scans); the backends are `cpu` (libjpeg-turbo +
batched torch ops), `cuda` (nvJPEG + torch ops on the GPU) and `cvcuda` (nvJPEG + CV-CUDA operators).
`build_preprocessor` picks one; all follow the archive's resize, crop, mean, std, interpolation and
antialias settings. `__all__` is what tools/ may import from this room.
"""

from .base import PreprocessResult, Preprocessor, dct_short_side
from .cpu import DCT_OVERSAMPLE, CpuPreprocessor
from .decode import EncodedImage, allowed_formats, decode_rgb, decoded_pixels, probe
from .factory import BackendChoice, build_preprocessor, choose_backend
from .tensor_ops import INTERPOLATION_MODES, Normalizer, resize_crop_stack

__all__ = ["DCT_OVERSAMPLE", "INTERPOLATION_MODES", "BackendChoice", "CpuPreprocessor", "EncodedImage", "Normalizer",
           "PreprocessResult", "Preprocessor", "allowed_formats", "build_preprocessor", "choose_backend", "dct_short_side",
           "decode_rgb", "decoded_pixels", "probe", "resize_crop_stack"]
