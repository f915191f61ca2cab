"""torch.export ExportedProgram with a dynamic batch dimension 1..max_batch."""

from __future__ import annotations

from pathlib import Path

from .base import Backend, CompileTarget


def export_program(model, target: CompileTarget, strict: bool = False):
    import torch

    example = target.example(target.trace_batch())
    if target.max_batch == 1:
        return torch.export.export(model, (example,), strict=strict)
    batch = torch.export.Dim("batch", min=1, max=target.max_batch)
    return torch.export.export(model, (example,), dynamic_shapes=({0: batch},), strict=strict)


def compile_export(model, target: CompileTarget, artifact: Path) -> None:
    import torch

    torch.export.save(export_program(model, target), str(artifact))


BACKEND = Backend(
    name="export",
    file_name="model.pt2",
    precisions={"cpu": ("fp32", "bf16"), "cuda": ("fp32", "fp16", "bf16")},
    compile=compile_export,
    summary="torch.export ExportedProgram (portable, runs eagerly)",
)
