"""int8 for AOTInductor on the CPU: PT2E post-training quantization (torchao), then a check that the
compiled package really runs its convolutions and linear layers in int8.

Why each step is as it is:
- Export is strict: non-strict export leaves torchvision ResNets with a partition that
  `prepare_pt2e` rejects ("Input partition has more than one output node").
- `X86InductorQuantizer` with its default (static, per-channel weights) config is what Inductor's
  oneDNN lowering fuses into quantized convolution kernels; calibration runs the photos the handler
  would see (`target.calibration`).
- A quantized graph can still compile to fp32 kernels (torchao has shipped paths where quantized
  Linear is not fused and silently runs fp32), so the generated wrapper is read back and the package
  is refused when no quantized convolution was emitted; the counts go into the archive.
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

from ...errors import UsageError
from ...extras import missing_extra
from .base import CompileTarget

CALIBRATION_CHUNK = 8  # photos per calibration forward (at most the exported batch range): the observers see every photo
INT8_KERNELS = {"conv": r"aoti_torch_cpu__qconv\w*", "linear": r"aoti_torch_cpu__qlinear\w*"}
FP32_KERNELS = {"conv": r"aoti_torch_cpu_mkldnn__convolution\w*", "linear": r"aoti_torch_cpu__linear_pointwise\w*"}


def require_torchao():
    try:
        from torchao.quantization.pt2e import quantize_pt2e
        from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer
    except ImportError as err:
        raise missing_extra("--backend aoti --precision int8 (torchao)", "int8", err) from None
    return quantize_pt2e, x86_inductor_quantizer


def quantized_program(model, target: CompileTarget, export_program):
    """The model quantized to int8 by PT2E, calibrated on `target.calibration`, exported again for AOTInductor."""
    import torch

    if target.calibration is None or len(target.calibration) == 0:
        raise UsageError("--precision int8 needs calibration photos (--calibration DIR)")
    quantize_pt2e, x86 = require_torchao()
    quantizer = x86.X86InductorQuantizer()
    quantizer.set_global(x86.get_default_x86_inductor_quantization_config())
    prepared = quantize_pt2e.prepare_pt2e(export_program(model, target, strict=True).module(), quantizer)
    chunk = min(CALIBRATION_CHUNK, target.max_batch)
    with torch.no_grad():
        for start in range(0, len(target.calibration), chunk):
            prepared(target.calibration[start:start + chunk])
    return export_program(quantize_pt2e.convert_pt2e(prepared), target, strict=True)


def kernel_counts(package: Path) -> dict[str, dict[str, int]]:
    """How many convolution and linear calls the package's generated wrapper makes in int8 and in fp32."""
    with zipfile.ZipFile(package) as archive:
        source = "".join(archive.read(n).decode(errors="ignore") for n in archive.namelist() if n.endswith("wrapper.cpp"))
    return {layer: {"int8": len(re.findall(INT8_KERNELS[layer], source)), "fp32": len(re.findall(FP32_KERNELS[layer], source))}
            for layer in INT8_KERNELS}


def check_quantized(package: Path) -> dict[str, dict[str, int]]:
    """The kernel counts, or a UsageError when the package would silently run its convolutions in fp32."""
    counts = kernel_counts(package)
    conv = counts["conv"]
    if conv["int8"] == 0 and conv["fp32"] > 0:
        raise UsageError(f"the int8 AOTInductor package runs all {conv['fp32']} convolutions in fp32 (no quantized kernel was "
                         "emitted), so it would be no faster; use --backend openvino --precision int8")
    return counts


def describe(counts: dict[str, dict[str, int]]) -> str:
    return ", ".join(f"{c['int8']} of {c['int8'] + c['fp32']} {layer} calls int8" for layer, c in counts.items() if c["int8"] + c["fp32"])
