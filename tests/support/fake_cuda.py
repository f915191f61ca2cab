"""A machine with several GPUs, as far as torch.cuda's bookkeeping goes, on a CPU-only machine.

`FakeCuda` imitates torch 2.14.1 `torch/cuda/__init__.py`: `is_available`, `device_count`,
`set_device` (changes the current device), `current_device`, `get_device_name` and
`get_device_capability` (of `architectures`, per index), and `current_stream(device=None)` (the
current stream of `device`, default the current device; `torch/cuda/streams.py` `Stream` has `.device`
and the `.cuda_stream` handle, 0 for the default stream). It also answers `features.has_cuda()`.
`events` lists what happened in order, so a test can say "set_device came before the model load"
(a stream's `synchronize` is listed as ("synchronize", its device index)).

`simulated_device_memory` gives CPU tensors the CUDA Array Interface that torch 2.14.1 gives CUDA
tensors (`torch/_tensor.py` `Tensor.__cuda_array_interface__`: version 2, no `stream` field; a CPU
tensor raises AttributeError there). CPU memory stands in for device memory, and `memory` maps each
exported buffer back to its tensor so a fake GPU library can read and write it. The limit: on the CPU
a tensor someone forgot to move to the GPU looks like any other; tests/gpu catch that for real.
Devices of CPU tensors are not checked: the CPU stands in for whichever GPU is current.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from tsvk.common import features


@dataclass(frozen=True)
class FakeStream:
    """`torch.cuda.Stream` as CV-CUDA reads it: the device it belongs to and its handle."""

    device: torch.device
    cuda_stream: int = 0
    owner: Any = field(default=None, compare=False, repr=False)  # the FakeCuda that records `synchronize`

    def synchronize(self) -> None:
        if self.owner is not None:
            self.owner.events.append(("synchronize", self.device.index))


class FakeCuda:
    def __init__(self, device_count: int = 2):
        self.count = device_count
        self.current = 0
        self.events: list[tuple[str, int]] = []
        self.architectures = {index: ("NVIDIA H100 80GB HBM3", (9, 0)) for index in range(device_count)}  # (name, capability)

    def install(self, monkeypatch) -> "FakeCuda":
        features.reset_cache()
        monkeypatch.setattr(features, "has_cuda", lambda: True)
        for name in ("is_available", "device_count", "set_device", "current_device", "current_stream",
                     "get_device_name", "get_device_capability"):
            monkeypatch.setattr(torch.cuda, name, getattr(self, name))
        return self

    def is_available(self) -> bool:
        return True

    def device_count(self) -> int:
        return self.count

    def index(self, device=None) -> int:
        """torch's rule: an int, a device with an index, else the current device (the CPU stands in for it)."""
        if isinstance(device, int):
            return device
        device = torch.device(device) if isinstance(device, str) else device
        return device.index if device is not None and device.type == "cuda" and device.index is not None else self.current

    def set_device(self, device) -> None:
        index = self.index(device)
        if not 0 <= index < self.count:
            raise RuntimeError(f"CUDA error: invalid device ordinal {index} (device_count {self.count})")
        self.current = index
        self.events.append(("set_device", index))

    def current_device(self) -> int:
        return self.current

    def get_device_name(self, device=None) -> str:
        return self.architectures[self.index(device)][0]

    def get_device_capability(self, device=None) -> tuple[int, int]:
        return self.architectures[self.index(device)][1]

    def current_stream(self, device=None) -> FakeStream:
        return FakeStream(torch.device("cuda", self.index(device)), owner=self)

    def record(self, event: str) -> None:
        self.events.append((event, self.current))

    def keep_cuda_tensors_on_cpu(self, monkeypatch) -> "FakeCuda":
        """`Tensor.to("cuda:N")` returns the tensor on the CPU, which stands in for GPU N's memory."""
        to = torch.Tensor.to

        def on_cpu(value):
            is_cuda = isinstance(value, torch.device) and value.type == "cuda"
            return torch.device("cpu") if is_cuda or (isinstance(value, str) and value.startswith("cuda")) else value

        def fake_to(tensor, *args, **kwargs):
            return to(tensor, *[on_cpu(a) for a in args], **{k: on_cpu(v) for k, v in kwargs.items()})

        monkeypatch.setattr(torch.Tensor, "to", fake_to)
        return self


_TYPESTR = {torch.uint8: "|u1", torch.int32: "<i4", torch.float16: "<f2", torch.float32: "<f4"}


class SimulatedDeviceMemory:
    """Exports CPU tensors through the CUDA Array Interface, as torch exports CUDA tensors."""

    def __init__(self):
        self.memory: dict[tuple, torch.Tensor] = {}

    def install(self, monkeypatch) -> "SimulatedDeviceMemory":
        monkeypatch.setattr(torch.Tensor, "__cuda_array_interface__", property(self.interface), raising=False)
        return self

    def interface(self, tensor: torch.Tensor) -> dict:
        shape = tuple(tensor.shape)
        strides = None if tensor.is_contiguous() else tuple(s * tensor.element_size() for s in tensor.stride())
        data = (tensor.data_ptr(), False)
        self.memory[(data[0], shape, strides)] = tensor
        return {"typestr": _TYPESTR[tensor.dtype], "shape": shape, "strides": strides, "data": data, "version": 2}

    def tensor(self, interface: dict) -> torch.Tensor:
        key = (interface["data"][0], tuple(interface["shape"]), interface["strides"])
        return self.memory[key]
