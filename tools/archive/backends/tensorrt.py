"""Torch-TensorRT (dynamo path), CUDA only: fp32 or fp16 engines with a dynamic batch 1..max_batch.

Two facts of Torch-TensorRT 2.14 (`torch_tensorrt/_compile.py`) shape this module:
- `save` re-exports the compiled module (retrace is on by default) with `dynamic_shapes=None` unless
  every input it is given is a `torch_tensorrt.Input`; example tensors would pin the saved program to
  the example's batch (`Guard failed: x.size()[0] == 2` at batch 1). So the same `Input(min, opt, max)`
  that the engine is built for is handed to `save`, which infers the dynamic batch from it.
- `compile(ir="dynamo")` does not use `enabled_precisions` (only the TorchScript and FX frontends do):
  the dynamo path is typed by the graph, so an fp16 engine comes from an fp16 model and fp16 inputs
  (`prepare_model` casts the model; the `Input` carries the dtype).
"""

from __future__ import annotations

from pathlib import Path

from ...errors import UsageError
from ...extras import install_line
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
        missing.append(f"an importable torch-tensorrt ({install_line('gpu')}; import failed: {err})")
        torch_tensorrt = None
    if missing:
        raise UsageError("--backend tensorrt needs " + " and ".join(missing) + "; nothing was written")
    return torch_tensorrt


def input_spec(trt, target: CompileTarget):
    """The batch range the engine accepts, as the one `Input` both `compile` and `save` are given."""
    shape = (3, target.crop, target.crop)
    return trt.Input(min_shape=(1, *shape), opt_shape=(target.max_batch, *shape), max_shape=(target.max_batch, *shape),
                     dtype=target.input_dtype)


def compile_tensorrt(model, target: CompileTarget, artifact: Path) -> None:
    trt = require_tensorrt()
    spec = input_spec(trt, target)
    compiled = trt.compile(model, ir="dynamo", arg_inputs=[spec])
    trt.save(compiled, str(artifact), output_format="exported_program", arg_inputs=[spec])


BACKEND = Backend(
    name="tensorrt",
    file_name="model.ep",
    precisions={"cuda": ("fp32", "fp16")},
    compile=compile_tensorrt,
    summary="Torch-TensorRT dynamo engine (CUDA only)",
)
