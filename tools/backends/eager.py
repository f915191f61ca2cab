"""Eager: the state_dict plus the model's code, for debugging a model the compilers reject."""

from __future__ import annotations

import copy
from pathlib import Path

from .base import Backend, CompileTarget


def compile_eager(model, target: CompileTarget, artifact: Path) -> None:
    import torch

    torch.save(model.state_dict(), str(artifact))


def load_eager(artifact: Path, device: str, template=None):
    """The state_dict needs the model's structure: `template` is an eager instance of it."""
    import torch

    if template is None:
        raise ValueError("loading an eager artifact needs the model structure (template)")
    model = copy.deepcopy(template)
    model.load_state_dict(torch.load(str(artifact), map_location=device, weights_only=True))
    return model.eval()


BACKEND = Backend(
    name="eager",
    file_name="model_state.pt",
    precisions={"cpu": ("fp32", "bf16"), "cuda": ("fp32", "fp16", "bf16")},
    compile=compile_eager,
    load=load_eager,
    summary="state_dict + model code, run eagerly (debugging)",
)
