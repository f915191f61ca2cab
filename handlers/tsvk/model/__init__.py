"""Loading a packed artifact (AOTInductor, torch.export, TorchScript, TensorRT, eager, OpenVINO) on the worker's
device, in the form its task runs, and the checks that it can run on this CPU. `__all__` is what tools/ may import."""

from ..common.lazy import lazy_attributes
from .cpu_isa import REMEDY, mismatch_here, recorded_target
from .cpu_precision import BF16_REMEDY, cpu_flags, emulated_bf16, native_bf16_flags

# imported on first use: the loaders import torch, which a command that only reads an archive's settings does not need
__getattr__ = lazy_attributes(__name__, {
    "gpu_architecture": ".loading", "load_model": ".loading", "FeatureMapTuple": ".openvino_detector",
    "heads_members": ".openvino_detector", "linear_box_head": ".openvino_detector", "write_ir_zip": ".openvino_ir"})

__all__ = ["BF16_REMEDY", "REMEDY", "FeatureMapTuple", "cpu_flags", "emulated_bf16", "gpu_architecture", "heads_members",
           "linear_box_head", "load_model", "mismatch_here", "native_bf16_flags", "recorded_target", "write_ir_zip"]
