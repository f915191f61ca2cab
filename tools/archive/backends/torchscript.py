"""TorchScript: the legacy format, for pipelines that still expect it.

Classifiers and segmenters are traced and frozen. A detector is scripted instead (its number of boxes
depends on the data, which a trace would freeze) and left unfrozen, so the handler can still set its
score threshold at load."""

from __future__ import annotations

import warnings
from pathlib import Path

from tsvk.common import task_kind

from .base import Backend, CompileTarget


def compile_torchscript(model, target: CompileTarget, artifact: Path) -> None:
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit is deprecated in 2.14; users asked for it by name
        with torch.no_grad():
            if task_kind(target.task).image_list:
                torch.jit.save(torch.jit.script(model.eval()), str(artifact))
                return
            traced = torch.jit.trace(model, target.example(target.trace_batch()), check_trace=False, strict=False)
            torch.jit.save(torch.jit.freeze(traced.eval()), str(artifact))


BACKEND = Backend(
    name="torchscript",
    file_name="model.ts",
    precisions={"cpu": ("fp32", "bf16"), "cuda": ("fp32", "fp16", "bf16")},
    compile=compile_torchscript,
    summary="TorchScript trace, frozen (legacy; deprecated in torch 2.14)",
)
