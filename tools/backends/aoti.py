"""AOTInductor: torch.export with a dynamic batch, compiled ahead of time with freezing into a .pt2 package."""

from __future__ import annotations

from pathlib import Path

from .base import Backend, CompileTarget
from .export import export_program


def compile_aoti(model, target: CompileTarget, artifact: Path) -> None:
    import torch

    program = export_program(model, target)
    if target.precision == "int8":
        program = _quantize_int8(program, target)
    # freezing folds weights into constants so Inductor can pre-pack them: the main CPU speedup
    torch._inductor.aoti_compile_and_package(program, package_path=str(artifact), inductor_configs={"freezing": True})


def _quantize_int8(program, target: CompileTarget):
    """PT2E post-training static quantization for x86 CPUs, calibrated on example batches."""
    import torch
    from torch.ao.quantization.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torch.ao.quantization.quantizer.x86_inductor_quantizer import X86InductorQuantizer, get_default_x86_inductor_quantization_config

    quantizer = X86InductorQuantizer().set_global(get_default_x86_inductor_quantization_config())
    prepared = prepare_pt2e(program.module(), quantizer)
    with torch.no_grad():
        for seed in range(8):
            prepared(target.example(target.trace_batch(), seed=100 + seed))
    converted = convert_pt2e(prepared)
    return export_program(converted, target)


def load_aoti(artifact: Path, device: str, template=None):
    import torch

    return torch._inductor.aoti_load_package(str(artifact))


BACKEND = Backend(
    name="aoti",
    file_name="model.pt2",
    precisions={"cpu": ("fp32", "bf16", "int8"), "cuda": ("fp32", "fp16", "bf16")},
    compile=compile_aoti,
    load=load_aoti,
    summary="torch.export + AOTInductor package with freezing (default; fastest on CPU)",
)
