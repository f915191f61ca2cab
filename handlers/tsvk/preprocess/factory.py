"""Pick the preprocessing backend for this worker: the one asked for, or the best one there is.

Order of preference: cvcuda > cuda > cpu, and the GPU ones only when the model runs on a GPU.
A backend asked for but unavailable falls back with one warning, or fails the load when
`preprocess.strict` is true.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from ..common import features
from ..common.settings import PreprocessSettings
from .base import Preprocessor
from .cpu import CpuPreprocessor
from .cv_cuda import CvCudaPreprocessor
from .torch_cuda import CudaPreprocessor

log = logging.getLogger(__name__)

PREFERENCE = ("cvcuda", "cuda", "cpu")


@dataclass(frozen=True)
class BackendChoice:
    name: str
    reason: str  # why this one, for the load log line


def unavailable_reason(backend: str, device: torch.device) -> str:
    """'' when `backend` can run for a model on `device`, else what is missing."""
    if backend == "cpu":
        return ""
    if device.type != "cuda":
        return f"the model runs on {device}, and the {backend} backend needs a CUDA device"
    if backend == "cvcuda" and not features.has_cvcuda():
        return f"cvcuda cannot be imported ({features.unavailable_reason('cvcuda') or 'no CUDA'})"
    return ""


def choose_backend(requested: str, device: torch.device, strict: bool) -> BackendChoice:
    if requested == "auto":
        best = next(name for name in PREFERENCE if not unavailable_reason(name, device))
        return BackendChoice(best, "auto: best available")
    missing = unavailable_reason(requested, device)
    if not missing:
        return BackendChoice(requested, "as configured")
    if strict:
        raise RuntimeError(
            f"preprocess.backend is {requested!r} but {missing}; "
            "set preprocess.backend to auto or cpu, or preprocess.strict to false to fall back"
        )
    fallback = next(name for name in PREFERENCE if not unavailable_reason(name, device))
    log.warning("preprocess.backend %r is unavailable (%s); falling back to %r", requested, missing, fallback)
    return BackendChoice(fallback, f"fallback from {requested}: {missing}")


def build_preprocessor(
    settings: PreprocessSettings, device: torch.device, dtype: torch.dtype = torch.float32
) -> tuple[Preprocessor, BackendChoice]:
    choice = choose_backend(settings.backend, device, settings.strict)
    return _BUILDERS[choice.name](settings, device, dtype), choice


_BUILDERS: dict[str, type[Preprocessor]] = {"cpu": CpuPreprocessor, "cuda": CudaPreprocessor, "cvcuda": CvCudaPreprocessor}
