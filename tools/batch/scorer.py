"""The archive's own service, loaded in a batch worker (a local worker process or a Ray actor), scoring
inputs into output rows.

A TorchServe worker imports the copy of `tsvk` packed in the archive (TorchServe puts the unpacked archive
first on sys.path); so does this, so a batch row is computed by the very code that serves the archive.
For that, this module imports nothing of `tsvk` at its top, and neither does anything a worker imports
before it (fetch.py is standard library only).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from ..archive_package import SERVICE_MODULES, first_module
from .fetch import InputError, read_input


@dataclass(frozen=True)
class WorkerSpec:
    """What one batch worker loads and how: the unpacked archive, its device and the answer options."""

    archive_dir: str
    model_name: str
    batch_size: int
    max_bytes: int
    threads: int = 1  # torch threads (intra-op); the plan gives single-threaded workers on the CPU
    gpu_id: int | None = None  # None: the CPU; else this GPU, as TorchServe assigns one to a worker
    options: dict = field(default_factory=dict)  # the answer options every input is sent with (form fields)


@dataclass(frozen=True)
class ArchiveContext:
    """What `VisionService.from_context` reads of TorchServe's `ts.context.Context` (ts/context.py, 0.12.0):
    system_properties (model_dir, gpu_id, batch_size), model_yaml_config and model_name; no metrics cache,
    so the service records none."""

    system_properties: dict
    model_yaml_config: dict
    model_name: str
    metrics: None = None


class ArchiveScorer:
    """Loads the archive once, then turns batches of (id, input) into output rows, one per input."""

    def __init__(self, spec: WorkerSpec):
        if spec.archive_dir not in sys.path:
            sys.path.insert(0, spec.archive_dir)
        import yaml

        VisionService = first_module(SERVICE_MODULES).VisionService  # the archive's copy: see the module's docstring

        self.spec = spec
        config = yaml.safe_load(Path(spec.archive_dir, "model-config.yaml").read_text())
        properties = {"model_dir": spec.archive_dir, "gpu_id": spec.gpu_id, "batch_size": spec.batch_size}
        os.environ["TS_CONFIG_FILE"] = thread_config(spec.model_name, spec.threads)
        try:
            self.service = VisionService.from_context(ArchiveContext(properties, config, spec.model_name))
        finally:
            os.unlink(os.environ.pop("TS_CONFIG_FILE"))

    def score(self, ids: Sequence[int], sources: Sequence[str]) -> list[str]:
        """One JSON row per input, in input order: the answer /predictions gives for its bytes, or its error."""
        started = time.monotonic()
        read = [read_input(source, self.spec.max_bytes) for source in sources]
        readable = [position for position, data in enumerate(read) if not isinstance(data, InputError)]
        outcome = self.service.answer([{"data": read[p], **self.spec.options} for p in readable]) if readable else None
        answered = {p: (outcome.statuses[i], outcome.answers[i]) for i, p in enumerate(readable)}
        rows = [row(ids[p], sources[p], *(answered[p] if p in answered else (read[p].status, read[p].body())))
                for p in range(len(sources))]
        self.service.heap.after_batch(time.monotonic() - started)
        return rows


def thread_config(model_name: str, threads: int) -> str:
    """A properties file holding this worker's thread plan, read by the service the way a served worker reads
    the one `tsvk config` writes (tsvk/worker/threads.py: TS_CONFIG_FILE, `tsvk.threads.<model>=<intra>,<inter>`)."""
    handle, path = tempfile.mkstemp(prefix="tsvk-batch-threads-", suffix=".properties")
    with os.fdopen(handle, "w") as properties:
        properties.write(f"tsvk.threads.{model_name}={threads},1\n")
    return path


def row(input_id: int, source: str, status: int, answer) -> str:
    """One output line: the id comes first, so a resumed run finds it without parsing the whole row."""
    code = answer.get("error") if status != 200 and isinstance(answer, dict) else None
    return json.dumps({"id": input_id, "input": source, "status": status, "code": code, "answer": answer})
