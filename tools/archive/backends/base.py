"""What every compile backend shares: the target it compiles for and the example inputs it traces with."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from tsvk.common import task_kind

from ... import defaults

INPUT_DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "int8": "float32"}  # int8 quantizes inside


@dataclass(frozen=True)
class CompileTarget:
    device: str  # cpu | cuda
    precision: str  # fp32 | fp16 | bf16 | int8
    max_batch: int
    crop: int
    calibration: Any = field(default=None, compare=False)  # int8: preprocessed photos, float32 NCHW
    task: str = "classify"
    size: tuple[int, int] = (0, 0)  # tasks that take whole photos: a typical model input's (height, width)
    max_side: int = 0  # whole photos in one NCHW batch: the largest height or width the artifact accepts (both dynamic)
    cpu_isa: str = defaults.CPU_ISA  # aoti on the cpu: the instructions its kernels use (backends/aoti.py CPU_ISA_SIMDLEN)

    @property
    def input_dtype(self):
        import torch

        return getattr(torch, INPUT_DTYPES[self.precision])

    def example(self, batch: int, seed: int = 0, size: tuple[int, int] | None = None):
        """A deterministic normalized-image-like batch on the target device and dtype: one NCHW tensor,
        or for a detector a list of (3, h, w) images of the sizes `detector_sizes` gives."""
        import torch

        generator = torch.Generator().manual_seed(seed)
        kind = task_kind(self.task)
        if kind.image_list:
            return [torch.randn(3, h, w, generator=generator).to(device=self.device, dtype=self.input_dtype)
                    for h, w in self.detector_sizes(batch)]
        height, width = size or ((self.crop, self.crop) if kind.crops else self.size)
        x = torch.randn(batch, 3, height, width, generator=generator)
        return x.to(device=self.device, dtype=self.input_dtype)

    def detector_sizes(self, batch: int) -> list[tuple[int, int]]:
        """Landscape, portrait and square inputs in turn: a batch of mixed sizes, as photos come."""
        height, width = self.size
        shapes = [(height, width), (width, height), (height, height)]
        return [shapes[i % len(shapes)] for i in range(batch)]

    def trace_batch(self) -> int:
        """Trace with a batch > 1 so export does not specialise the batch dimension to 1."""
        return min(2, self.max_batch) if self.max_batch > 1 else 1


@dataclass(frozen=True)
class Backend:
    """A compile backend: where it runs, what it writes, how it compiles.

    There is no load here: build-time verification loads every artifact with the handler's own
    loader (`tsvk.model.loading.load_model`), so what is verified is exactly what a worker serves."""

    name: str
    file_name: str
    precisions: dict[str, tuple[str, ...]]  # device -> supported precisions
    # (eager model on target, target, artifact path) -> facts about the compiled artifact for the archive's
    # provenance (e.g. how many kernels run int8), or None
    compile: Callable[[Any, CompileTarget, Path], dict | None]
    summary: str
    bf16_note: str = ""  # why it builds no bf16 on the CPU, where it builds none (said by --precision auto)


def prepare_model(model, target: CompileTarget):
    """The eager model moved to the target device and precision."""
    model = model.to(target.device)
    if target.precision in ("fp16", "bf16"):
        model = model.to(target.input_dtype)
    return model.eval()
