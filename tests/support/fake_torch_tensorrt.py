"""A stand-in for torch_tensorrt that behaves like Torch-TensorRT 2.14 where our build depends on it.

Read from the torch-tensorrt 2.14.0 wheel (cp311, manylinux_2_28):
- `Input` imitates `torch_tensorrt/_Input.py` `Input.__init__` / `example_tensor`: min, opt and max shapes
  make it dynamic, and its `torch_tensor` is an example of the opt shape.
- `compile` imitates `torch_tensorrt/_compile.py` `compile`: `enabled_precisions` is used by the ts and fx
  frontends only, never passed to the dynamo path (recorded here in `ignored`); with `ir="dynamo"` the
  module is traced by `dynamo/_tracer.py` `trace`, with the dynamic shapes `get_dynamic_shapes` derives
  from each `Input` (a dim whose min, opt and max differ becomes a `torch.export.Dim(min, max)`).
- `save` imitates `torch_tensorrt/_compile.py` `save`, fx.GraphModule branch, `retrace=True` (the default):
  only when every input is an `Input` are `dynamic_shapes` inferred from them; otherwise the module is
  re-exported with `torch.export.export(module, args, dynamic_shapes=dynamic_shapes, strict=False)`, which
  with plain example tensors and no `dynamic_shapes` guards every dim to the example's size.
- `load` of an exported program rebuilds its engines, as the real one does when torch.export.load
  unpickles each `torch.classes.tensorrt.Engine` constant (`dynamo/runtime/_TRTEngine.py`
  `_reconstruct_trt_engine` -> the TRTEngine constructor): `core/runtime/runtime.cpp`
  `get_most_compatible_device` takes the devices whose compute capability equals the one the engine was
  built for, preferring the current device, then the device id it was saved from, then the first; with
  none it fails with "No compatible device was found for instantiating TensorRT engine"; then
  `set_rt_device` makes the chosen device current. Each rebuilt engine is in `engines`.
Where it differs, on purpose: the compiled module runs in torch (no engine), so the program holds no
engine constant (move_to_device_pass on a real one runs in tests/gpu only); the device an engine was built
on is kept in the saved file's extra files; example tensors are made on the model's device (the real one
uses the current CUDA device, `dynamo/_defaults.py` `default_device`), so all of it runs on the CPU.
"""

from __future__ import annotations

import inspect
import types
from dataclasses import dataclass
from typing import Any, Sequence

import torch


class Input:
    """`torch_tensorrt.Input`: a static `shape`, or a dynamic `min_shape` / `opt_shape` / `max_shape`."""

    def __init__(self, shape=None, *, min_shape=None, opt_shape=None, max_shape=None, dtype=torch.float32, name=""):
        self.dynamic = shape is None
        self.shape = {"min_shape": tuple(min_shape), "opt_shape": tuple(opt_shape), "max_shape": tuple(max_shape)} \
            if self.dynamic else tuple(shape)
        self.dtype, self.name = dtype, name
        self.torch_tensor = self.example_tensor("opt_shape" if self.dynamic else None)

    def example_tensor(self, field: str | None = None) -> torch.Tensor:
        shape = self.shape[field] if self.dynamic else self.shape
        return torch.rand(shape).to(self.dtype)


def inferred_dynamic_shapes(module, inputs: Sequence[Any]) -> dict[str, dict]:
    """`dynamo/_tracer.py` `get_dynamic_shapes_args`: forward's argument names -> {dim: Dim} per input."""
    names = list(inspect.signature(module.forward).parameters)
    shapes = {}
    for spec, name in zip(inputs, names):
        dims = {}
        if isinstance(spec, Input) and spec.dynamic:
            low, opt, high = (spec.shape[k] for k in ("min_shape", "opt_shape", "max_shape"))
            dims = {d: torch.export.Dim(f"{spec.name}_{d}", min=low[d], max=high[d])
                    for d in range(len(low)) if not low[d] == opt[d] == high[d]}
        shapes[name] = dims
    return shapes


def _device_of(module) -> torch.device:
    first = next(iter(module.parameters()), None)
    return first.device if first is not None else torch.device("cpu")


def _example(spec, device: torch.device) -> torch.Tensor:
    return (spec.torch_tensor if isinstance(spec, Input) else spec).to(device)


ENGINE_DEVICE_FILE = "fake_trt_engine_device"  # extra file: runtime.cpp's serialized CudaDevice, "id%major%minor%type%name"
UNSEEN_GPU = (0, (9, 0), "NVIDIA H100 80GB HBM3")  # what an engine says it was built on where no fake GPUs are installed


@dataclass(frozen=True)
class FakeEngine:
    built_on: tuple[int, tuple[int, int], str]  # (device id, compute capability, name) it was serialized from
    device: int  # where it was instantiated


def _current_gpu() -> tuple[int, tuple[int, int], str]:
    """The current CUDA device as (id, capability, name): the fake GPUs of tests/support/fake_cuda.py, if installed."""
    try:
        index = torch.cuda.current_device()
        return index, tuple(torch.cuda.get_device_capability(index)), torch.cuda.get_device_name(index)
    except (RuntimeError, AssertionError, AttributeError):
        return UNSEEN_GPU


def _serialize_device(gpu: tuple[int, tuple[int, int], str]) -> str:
    index, (major, minor), name = gpu
    return f"{index}%{major}%{minor}%0%{name}"


def _deserialize_device(text: str) -> tuple[int, tuple[int, int], str]:
    index, major, minor, _, name = text.split("%", 4)
    return int(index), (int(major), int(minor)), name


def most_compatible_device(built_on: tuple[int, tuple[int, int], str]) -> int:
    """runtime.cpp `get_most_compatible_device` for GPU engines, without hardware compatibility."""
    target_id, capability, name = built_on
    candidates = [i for i in range(torch.cuda.device_count()) if tuple(torch.cuda.get_device_capability(i)) == capability]
    if not candidates:
        raise RuntimeError("No compatible device was found for instantiating TensorRT engine")
    if len(candidates) == 1:
        return candidates[0]
    current = torch.cuda.current_device()
    same_name = [i for i in candidates if torch.cuda.get_device_name(i) == name] or candidates
    for preferred in (current, target_id):
        if preferred in same_name:
            return preferred
    return same_name[0]


class FakeTorchTensorRT(types.ModuleType):
    """Install with `monkeypatch.setitem(sys.modules, "torch_tensorrt", FakeTorchTensorRT())`."""

    Input = Input

    def __init__(self):
        super().__init__("torch_tensorrt")
        self.calls: dict[str, dict] = {}
        self.ignored: list[str] = []  # arguments the real dynamo path accepts and does not use
        self.engines: list[FakeEngine] = []  # rebuilt by `load`

    def compile(self, module, ir="default", inputs=None, arg_inputs=None, kwarg_inputs=None, enabled_precisions=None, **kwargs):
        specs = list(inputs if inputs is not None else arg_inputs)
        self.calls["compile"] = {"ir": ir, "inputs": specs, **kwargs}
        if enabled_precisions is not None and ir == "dynamo":
            self.ignored.append("enabled_precisions")
        args = tuple(_example(spec, _device_of(module)) for spec in specs)
        return torch.export.export(module, args, dynamic_shapes=inferred_dynamic_shapes(module, specs), strict=False).module()

    def save(self, module, file_path, *, output_format="exported_program", inputs=None, arg_inputs=None,
             retrace=True, dynamic_shapes=None, **kwargs):
        specs = list(inputs if inputs is not None else arg_inputs)
        self.calls["save"] = {"output_format": output_format, "inputs": specs, "retrace": retrace, **kwargs}
        if dynamic_shapes is None and all(isinstance(spec, Input) for spec in specs):
            dynamic_shapes = inferred_dynamic_shapes(module, specs)
        args = tuple(_example(spec, _device_of(module)) for spec in specs)
        program = torch.export.export(module, args, dynamic_shapes=dynamic_shapes, strict=False)
        torch.export.save(program, file_path, extra_files={ENGINE_DEVICE_FILE: _serialize_device(_current_gpu())})

    def load(self, file_path, **kwargs):
        """As the real one for an `exported_program` file: torch.export's own load, which rebuilds the engines."""
        self.calls["load"] = {"file_path": file_path, **kwargs}
        extra = {ENGINE_DEVICE_FILE: ""}
        program = torch.export.load(file_path, extra_files=extra)
        built_on = _deserialize_device(extra[ENGINE_DEVICE_FILE])
        if torch.cuda.is_available() and _current_gpu() != UNSEEN_GPU:
            device = most_compatible_device(built_on)
            torch.cuda.set_device(device)  # runtime.cpp `set_rt_device`
        else:
            device = built_on[0]
        self.engines.append(FakeEngine(built_on, device))
        return program
