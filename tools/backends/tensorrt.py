"""Torch-TensorRT (dynamo path), CUDA only: fp32 or fp16 engines with a dynamic batch."""

from __future__ import annotations

from pathlib import Path

from ..errors import UsageError
from .base import Backend, CompileTarget


def require_tensorrt():
    """torch_tensorrt, or a UsageError naming exactly what is missing (CUDA, the package, or both)."""
    import torch

    missing = []
    if not torch.cuda.is_available():
        missing.append("a CUDA device (torch.cuda.is_available() is False)")
    try:
        import torch_tensorrt
    except Exception as err:  # ImportError, or OSError for libcuda.so.1 on a driver-less machine
        missing.append(f"an importable torch-tensorrt (pip install torch-tensorrt; import failed: {err})")
        torch_tensorrt = None
    if missing:
        raise UsageError("--backend tensorrt needs " + " and ".join(missing) + "; nothing was written")
    return torch_tensorrt


def compile_tensorrt(model, target: CompileTarget, artifact: Path) -> None:
    import torch

    trt = require_tensorrt()
    shape = (3, target.crop, target.crop)
    spec = trt.Input(min_shape=(1, *shape), opt_shape=(target.max_batch, *shape), max_shape=(target.max_batch, *shape), dtype=target.input_dtype)
    precisions = {torch.float16, torch.float32} if target.precision == "fp16" else {torch.float32}
    compiled = trt.compile(model, ir="dynamo", inputs=[spec], enabled_precisions=precisions)
    trt.save(compiled, str(artifact), output_format="exported_program", inputs=[target.example(target.trace_batch())])


def load_tensorrt(artifact: Path, device: str, template=None):
    import torch

    require_tensorrt()  # registers the TensorRT engine classes that the saved program refers to
    return torch.export.load(str(artifact)).module()


BACKEND = Backend(
    name="tensorrt",
    file_name="model.ep",
    precisions={"cuda": ("fp32", "fp16")},
    compile=compile_tensorrt,
    load=load_tensorrt,
    summary="Torch-TensorRT dynamo engine (CUDA only)",
)
