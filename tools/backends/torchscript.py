"""TorchScript (traced and frozen): the legacy format, for pipelines that still expect it."""

from __future__ import annotations

import warnings
from pathlib import Path

from .base import Backend, CompileTarget


def compile_torchscript(model, target: CompileTarget, artifact: Path) -> None:
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit is deprecated in 2.14; users asked for it by name
        with torch.no_grad():
            traced = torch.jit.trace(model, target.example(target.trace_batch()), check_trace=False)
            torch.jit.save(torch.jit.freeze(traced.eval()), str(artifact))


BACKEND = Backend(
    name="torchscript",
    file_name="model.ts",
    precisions={"cpu": ("fp32", "bf16"), "cuda": ("fp32", "fp16", "bf16")},
    compile=compile_torchscript,
    summary="TorchScript trace, frozen (legacy; deprecated in torch 2.14)",
)
