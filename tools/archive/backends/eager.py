"""Eager: the state_dict plus the model's code, for debugging a model the compilers reject."""

from __future__ import annotations

from pathlib import Path

from .base import Backend, CompileTarget


def compile_eager(model, target: CompileTarget, artifact: Path) -> None:
    import torch

    torch.save(model.state_dict(), str(artifact))


BACKEND = Backend(
    name="eager",
    file_name="model_state.pt",
    precisions={"cpu": ("fp32", "bf16"), "cuda": ("fp32", "fp16", "bf16")},
    compile=compile_eager,
    summary="state_dict + model code, run eagerly (debugging)",
)
