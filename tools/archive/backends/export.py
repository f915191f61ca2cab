"""torch.export ExportedProgram with a dynamic batch dimension 1..max_batch."""

from __future__ import annotations

from pathlib import Path

from tsvk.common import task_kind

from .base import Backend, CompileTarget


SEGMENT_MIN_SIDE = 32  # the smallest height or width a segmentation artifact accepts


def export_program(model, target: CompileTarget, strict: bool = False):
    """Batch dynamic (1..max_batch); where the task takes whole photos (a segmenter), height and width too
    (SEGMENT_MIN_SIDE..max_side)."""
    import torch

    example = target.example(target.trace_batch())
    dims = {}
    if target.max_batch > 1:
        dims[0] = torch.export.Dim("batch", min=1, max=target.max_batch)
    if not task_kind(target.task).crops:
        dims[2] = torch.export.Dim("height", min=SEGMENT_MIN_SIDE, max=target.max_side)
        dims[3] = torch.export.Dim("width", min=SEGMENT_MIN_SIDE, max=target.max_side)
    if not dims:
        return torch.export.export(model, (example,), strict=strict)
    return torch.export.export(model, (example,), dynamic_shapes=(dims,), strict=strict)


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
