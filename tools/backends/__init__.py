"""Compile backends by name; each module holds one, `get_backend` checks what the user asked for."""

from __future__ import annotations

from ..errors import UsageError
from . import aoti, eager, export, tensorrt, torchscript
from .base import Backend, CompileTarget, prepare_model

BACKENDS: dict[str, Backend] = {b.name: b for b in (aoti.BACKEND, export.BACKEND, torchscript.BACKEND, tensorrt.BACKEND, eager.BACKEND)}

__all__ = ["BACKENDS", "Backend", "CompileTarget", "get_backend", "check_target", "prepare_model"]


def get_backend(name: str) -> Backend:
    if name not in BACKENDS:
        raise UsageError(f"BACKEND must be one of {', '.join(BACKENDS)}, got {name!r}")
    return BACKENDS[name]


def check_target(backend: Backend, device: str, precision: str) -> None:
    """Refuse unsupported combinations with the list of supported ones."""
    supported = backend.precisions.get(device)
    if supported is None:
        raise UsageError(f"BACKEND={backend.name} does not run on DEVICE={device}; it supports DEVICE={', '.join(backend.precisions)}")
    if precision not in supported:
        combos = "; ".join(f"DEVICE={d}: PRECISION={'|'.join(p)}" for d, p in backend.precisions.items())
        raise UsageError(f"BACKEND={backend.name} DEVICE={device} does not support PRECISION={precision}; supported: {combos}")
    if device == "cuda" and backend.name == "tensorrt":
        tensorrt.require_tensorrt()  # fail before any work, naming what is missing
    elif device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UsageError(f"DEVICE=cuda needs a CUDA device and none is visible (torch.cuda.is_available() is False); use DEVICE=cpu")
