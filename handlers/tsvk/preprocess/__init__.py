"""Batch preprocessing backends: encoded images -> one normalized NCHW tensor on the model's device.

`cpu` (libjpeg-turbo + batched torch ops), `cuda` (nvJPEG + torch ops on the GPU) and `cvcuda`
(nvJPEG + CV-CUDA operators). `build_preprocessor` picks one; all follow the archive's resize, crop,
mean, std, interpolation and antialias settings.
"""

from .base import PreprocessResult, Preprocessor
from .factory import BackendChoice, build_preprocessor, choose_backend

__all__ = ["BackendChoice", "PreprocessResult", "Preprocessor", "build_preprocessor", "choose_backend"]
