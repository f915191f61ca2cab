"""AOTInductor: torch.export with a dynamic batch, compiled ahead of time with freezing into a .pt2 package."""

from __future__ import annotations

from pathlib import Path

from .base import Backend, CompileTarget
from .export import export_program


def compile_aoti(model, target: CompileTarget, artifact: Path) -> None:
    import torch

    program = export_program(model, target)
    # freezing folds weights into constants so Inductor can pre-pack them: the main CPU speedup
    torch._inductor.aoti_compile_and_package(program, package_path=str(artifact), inductor_configs={"freezing": True})


BACKEND = Backend(
    name="aoti",
    file_name="model.pt2",
    precisions={"cpu": ("fp32", "bf16"), "cuda": ("fp32", "fp16", "bf16")},
    compile=compile_aoti,
    summary="torch.export + AOTInductor package with freezing (default; fastest on CPU)",
)
