"""OpenVINO, CPU only: the eager model converted by OpenVINO's PyTorch frontend, fp32 or NNCF int8.

The IR has a dynamic batch 1..max_batch and travels as one zip (`tsvk.openvino_ir`). int8 is NNCF's
post-training quantization, calibrated on real photos preprocessed as the handler does
(`target.calibration`, chosen by `tools/calibration.py`); its accuracy is verified on held-out
photos, not by a logit tolerance (`tools/verify_int8.py`). Like every artifact, it is loaded back
for verification by the handler's own loader (`tsvk.loading`), so the build verifies what a worker runs.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from tsvk.openvino_ir import write_ir_zip

from ..errors import UsageError
from .base import Backend, CompileTarget


def require_openvino(precision: str = "fp32"):
    """openvino (and nncf for int8), or a UsageError with the pip command."""
    try:
        import openvino as ov
    except ImportError as err:
        raise UsageError(f"--backend openvino needs openvino: pip install openvino (import failed: {err})") from None
    if precision == "int8":
        try:
            import nncf  # noqa: F401
        except ImportError as err:
            raise UsageError(f"--precision int8 needs nncf: pip install nncf (import failed: {err})") from None
    return ov


def convert(ov, model, target: CompileTarget):
    """OpenVINO's PyTorch frontend (it traces with TorchScript: its deprecation warnings are not the user's)."""
    shape = ov.PartialShape([ov.Dimension(1, target.max_batch), 3, target.crop, target.crop])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ov.convert_model(model, example_input=target.example(target.trace_batch()), input=[shape])


def quantize(ov_model, calibration):
    """NNCF post-training int8 on every calibration photo, one photo per inference as served at batch 1."""
    import nncf

    if calibration is None or len(calibration) == 0:
        raise UsageError("--precision int8 needs calibration photos (--calibration DIR)")
    samples = [calibration[i:i + 1].numpy() for i in range(len(calibration))]
    return nncf.quantize(ov_model, nncf.Dataset(samples), subset_size=len(samples))


def compile_openvino(model, target: CompileTarget, artifact: Path) -> None:
    ov = require_openvino(target.precision)
    ov_model = convert(ov, model, target)
    if target.precision == "int8":
        ov_model = quantize(ov_model, target.calibration)
    write_ir_zip(ov, ov_model, artifact)


BACKEND = Backend(
    name="openvino",
    file_name="model.ov.zip",
    precisions={"cpu": ("fp32", "int8")},
    compile=compile_openvino,
    summary="OpenVINO IR (CPU): fp32, or int8 by NNCF post-training quantization on --calibration photos",
)
