"""The `openvino` artifact: OpenVINO's IR (.xml graph + .bin weights) as one zip file, and running it.

TorchServe's archiver packs one serialized file, and an IR is two; a zip of both (stored, not
compressed: weights barely compress) keeps "one artifact, one file" for the archive, the settings
(`artifact.file`) and the loader. The loader reads both members into memory and hands them to
`Core.read_model`, so nothing is unpacked into the model directory.

The CPU plugin runs fp32 graphs in bf16 by default where the CPU has bf16 instructions (AVX-512
BF16, AMX): `INFERENCE_PRECISION_HINT` is set to f32, so what runs is what verification compared
(an int8 artifact's quantized layers stay int8; the layers between them stay fp32).
"""

from __future__ import annotations

import tempfile
import zipfile
from pathlib import Path
from typing import Any, Callable

IR_XML = "model.xml"
IR_BIN = "model.bin"
# f32: what runs is what verification compared. No pinning: the plugin pins its threads to cores chosen
# inside each process, so the single-threaded workers of one machine all landed on the same core (two
# processes of one thread each ran a detector's backbone 1.28x slower than unpinned); where workers go
# is the config's `tsvk` pinning option's business.
CPU_PROPERTIES = {"INFERENCE_PRECISION_HINT": "f32", "ENABLE_CPU_PINNING": False}


def write_ir_zip(ov: Any, model: Any, path: Path, extra: dict[str, bytes] | None = None) -> None:
    """Save an `ov.Model` as IR (weights kept in fp32 or int8, never compressed to fp16) into one zip,
    with `extra` members beside it (a detector's eager heads and the names of its feature maps)."""
    with tempfile.TemporaryDirectory() as work:
        xml = Path(work) / IR_XML
        ov.save_model(model, str(xml), compress_to_fp16=False)
        with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as bundle:
            bundle.write(xml, IR_XML)
            bundle.write(xml.with_suffix(".bin"), IR_BIN)
            for name, data in (extra or {}).items():
                bundle.writestr(name, data)


def read_member(path: Path, name: str) -> bytes | None:
    """One extra member of an IR zip, or None when the zip has none of that name."""
    with zipfile.ZipFile(path) as bundle:
        return bundle.read(name) if name in bundle.namelist() else None


def read_ir_zip(ov: Any, core: Any, path: Path) -> Any:
    """The `ov.Model` in an IR zip, read from memory."""
    import numpy as np

    with zipfile.ZipFile(path) as bundle:
        names = set(bundle.namelist())
        if not {IR_XML, IR_BIN} <= names:
            raise ValueError(f"{path.name} must hold {IR_XML} and {IR_BIN} (an OpenVINO IR); it holds {sorted(names)}")
        graph, weights = bundle.read(IR_XML), bundle.read(IR_BIN)
    return core.read_model(graph, ov.Tensor(np.frombuffer(weights, dtype=np.uint8)))


def compiled_on_cpu(ov: Any, path: Path, threads: int) -> Any:
    """The IR compiled for the CPU plugin with `threads` inference threads, in fp32 as verified."""
    core = ov.Core()
    return core.compile_model(read_ir_zip(ov, core, path), "CPU", {**CPU_PROPERTIES, "INFERENCE_NUM_THREADS": threads})


def compile_for_cpu(ov: Any, path: Path, threads: int) -> Callable:
    """The IR compiled for the CPU with `threads` inference threads: torch batch in, torch logits out."""
    import torch

    compiled = compiled_on_cpu(ov, path, threads)
    output = compiled.output(0)

    def forward(batch: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(compiled(batch.detach().cpu().contiguous().numpy())[output])

    return forward
