"""Compile backends by name; each module holds one, `get_backend` checks what the user asked for.

The names are the artifact formats of the settings schema (`tsvk.common.settings.ARTIFACT_FORMATS`), and
each backend lives in the module of the same name: a new format is a name there and a module here.
"""

from __future__ import annotations

import importlib

from tsvk.common import ARTIFACT_FORMATS

from ...errors import UsageError
from .base import Backend, CompileTarget, prepare_model
from .tensorrt import require_tensorrt

BACKENDS: dict[str, Backend] = {name: importlib.import_module(f"{__name__}.{name}").BACKEND for name in ARTIFACT_FORMATS}

__all__ = ["BACKENDS", "Backend", "CompileTarget", "get_backend", "check_target", "prepare_model"]

def get_backend(name: str) -> Backend:
    if name not in BACKENDS:
        raise UsageError(f"--backend must be one of {', '.join(BACKENDS)}, got {name!r}")
    return BACKENDS[name]


def _elsewhere(precision: str) -> str:
    """Where a precision this backend lacks is offered, e.g. '; --precision int8: use --backend openvino --device cpu'."""
    offers = [f"--backend {b.name} --device {d}" for b in BACKENDS.values() for d, p in b.precisions.items() if precision in p]
    return f"; --precision {precision}: use {' or '.join(offers)}" if offers else ""


def check_target(backend: Backend, device: str, precision: str) -> None:
    """Refuse unsupported combinations with the list of supported ones."""
    supported = backend.precisions.get(device)
    if supported is None:
        raise UsageError(f"--backend {backend.name} does not run on --device {device}; it supports --device "
                         f"{' or '.join(backend.precisions)}")
    if precision not in supported:
        combos = "; ".join(f"--device {d}: --precision {'|'.join(p)}" for d, p in backend.precisions.items())
        raise UsageError(f"--backend {backend.name} --device {device} does not support --precision {precision}; supported: {combos}"
                         f"{_elsewhere(precision)}")
    if device == "cuda" and backend.name == "tensorrt":
        require_tensorrt()  # fail before any work, naming what is missing
    elif device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UsageError("--device cuda needs a CUDA device and none is visible (torch.cuda.is_available() is False); "
                             "use --device cpu")
