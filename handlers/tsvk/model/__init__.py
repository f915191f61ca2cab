"""Loading a packed artifact (AOTInductor, torch.export, TorchScript, TensorRT, eager, OpenVINO) on the worker's
device, in the form its task runs, and the checks that it can run on this CPU. `__all__` is what tools/ may import."""

from .cpu_isa import REMEDY, mismatch_here, recorded_target
from .loading import gpu_architecture, load_model
from .openvino_detector import FeatureMapTuple, heads_members, linear_box_head
from .openvino_ir import write_ir_zip

__all__ = ["REMEDY", "FeatureMapTuple", "gpu_architecture", "heads_members", "linear_box_head", "load_model",
           "mismatch_here", "recorded_target", "write_ir_zip"]
