"""AOTInductor: torch.export with a dynamic batch, compiled ahead of time with freezing into a .pt2 package.

int8 (CPU) is PT2E post-training quantization first (`pt2e.py`); the package it gives is checked to
really run quantized kernels, and the counts are returned for the archive's provenance.
"""

from __future__ import annotations

from pathlib import Path

from .base import Backend, CompileTarget
from . import pt2e
from .export import export_program


# The CPU instructions a CPU package's kernels are compiled for, as Inductor's vector width (`cpp.simdlen`):
# native is this machine's widest (AVX-512 here and there); avx2 runs on any x86-64 CPU with AVX2. A package runs
# only on CPUs that have its instructions (handlers/tsvk/model/cpu_isa.py refuses it elsewhere, by name).
CPU_ISA_SIMDLEN = {"native": None, "avx2": 256}


def compile_aoti(model, target: CompileTarget, artifact: Path) -> dict | None:
    import torch

    int8 = target.precision == "int8"
    program = pt2e.quantized_program(model, target, export_program) if int8 else export_program(model, target)
    # freezing folds weights into constants so Inductor can pre-pack them: the main CPU speedup
    simdlen = CPU_ISA_SIMDLEN[target.cpu_isa] if target.device == "cpu" else None
    configs = {"freezing": True, **({"cpp.simdlen": simdlen} if simdlen else {})}
    torch._inductor.aoti_compile_and_package(program, package_path=str(artifact), inductor_configs=configs)
    if int8:
        counts = pt2e.check_quantized(artifact)
        print(f"aoti int8: {pt2e.describe(counts)}")
        return {"int8_kernels": counts}
    return None


BACKEND = Backend(
    name="aoti",
    file_name="model.pt2",
    precisions={"cpu": ("fp32", "bf16", "int8"), "cuda": ("fp32", "fp16", "bf16")},
    compile=compile_aoti,
    summary="torch.export + AOTInductor package with freezing (default; fastest on CPU)",
)
