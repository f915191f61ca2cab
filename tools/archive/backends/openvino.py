"""OpenVINO, CPU only: the eager model converted by OpenVINO's PyTorch frontend, fp32 or NNCF int8;
of a detector, the backbone only (fp32), its heads staying eager, at int8 an R-CNN's box head in
dynamic int8 (`tsvk.openvino_detector`).

The IR has a dynamic batch 1..max_batch (a segmenter's height and width are dynamic too) and travels
as one zip (`tsvk.model.openvino_ir`). int8 is NNCF's post-training quantization, calibrated on real photos
preprocessed as the handler does (`target.calibration`, chosen by `tools/archive/calibration.py`: one tensor
per photo, each at its own size for a segmenter); its answers are verified on held-out photos, not by
a logit tolerance (`tools/archive/verify_int8.py`). Like every artifact, it is loaded back
for verification by the handler's own loader (`tsvk.model.loading`), so the build verifies what a worker runs.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from tsvk.common import task_kind
from tsvk.model import write_ir_zip

from ...errors import UsageError
from ...extras import missing_extra
from .base import Backend, CompileTarget
from .export import SEGMENT_MIN_SIDE


def require_openvino(precision: str = "fp32"):
    """openvino (and nncf for int8), or a UsageError with the pip command."""
    try:
        import openvino as ov
    except ImportError as err:
        raise missing_extra("--backend openvino", "openvino", err) from None
    if precision == "int8":
        try:
            import nncf  # noqa: F401
        except ImportError as err:
            raise missing_extra("--backend openvino --precision int8 (nncf)", "openvino", err) from None
    return ov


def input_shape(ov, target: CompileTarget):
    """Batch 1..max_batch; a classifier's crop is fixed, a segmenter's height and width are not."""
    batch = ov.Dimension(1, target.max_batch)
    if not task_kind(target.task).crops:
        side = ov.Dimension(SEGMENT_MIN_SIDE, target.max_side)
        return ov.PartialShape([batch, 3, side, side])
    return ov.PartialShape([batch, 3, target.crop, target.crop])


def convert(ov, model, target: CompileTarget):
    """OpenVINO's PyTorch frontend (it traces with TorchScript: its deprecation warnings are not the user's)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ov.convert_model(model, example_input=target.example(target.trace_batch()), input=[input_shape(ov, target)])


def quantize(ov_model, calibration):
    """NNCF post-training int8 on every calibration photo, one photo per inference as served at batch 1."""
    import nncf

    from ..calibration import one_photo_batches  # torch: the handler's preprocessing, only once int8 is built

    if calibration is None or len(calibration) == 0:
        raise UsageError("--precision int8 needs calibration photos (--calibration DIR)")
    samples = [photo.numpy() for photo in one_photo_batches(calibration)]
    return nncf.quantize(ov_model, nncf.Dataset(samples), subset_size=len(samples))


def compile_openvino(model, target: CompileTarget, artifact: Path) -> None:
    ov = require_openvino(target.precision)
    if task_kind(target.task).openvino_backbone:
        return compile_detector_backbone(ov, model, target, artifact)
    ov_model = convert(ov, model, target)
    if target.precision == "int8":
        ov_model = quantize(ov_model, target.calibration)
    write_ir_zip(ov, ov_model, artifact)


def compile_detector_backbone(ov, detector, target: CompileTarget, artifact: Path) -> None:
    """The backbone (with its FPN) as IR, dynamic in batch, height and width (the padded batch of
    whatever photos come), and the heads' weights beside it in the zip (`tsvk.model.openvino_detector`)."""
    from tsvk.model import FeatureMapTuple, heads_members, linear_box_head  # torch: only for a detector's IR

    if target.precision == "int8" and linear_box_head(detector) is None:
        raise UsageError(f"--precision int8 runs an R-CNN box head's fully connected layers in int8, and "
                         f"{type(detector).__name__} has none (RetinaNet, FCOS and SSD heads are convolutions); use "
                         f"--precision fp32")
    batch = detector.transform(target.example(target.trace_batch()))[0].tensors
    names = list(detector.backbone(batch).keys())
    shape = ov.PartialShape([ov.Dimension(1, target.max_batch), 3, -1, -1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ov_model = ov.convert_model(FeatureMapTuple(detector.backbone), example_input=batch, input=[shape])
    write_ir_zip(ov, ov_model, artifact, extra=heads_members(detector, names))


BACKEND = Backend(
    name="openvino",
    file_name="model.ov.zip",
    precisions={"cpu": ("fp32", "int8")},
    compile=compile_openvino,
    summary="OpenVINO IR (CPU): fp32, or int8 by NNCF post-training quantization on --calibration photos",
    bf16_note="OpenVINO's CPU plugin would pick bf16 itself where the CPU has it; tsvk pins its inference precision to "
              "f32 so that what runs is what was verified",
)
