"""Test helpers for tsvk's own engine (tools/engines/kserve): started on a generated config, always stopped."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

from tsvk_tools.engines.kserve.engine_process import EngineRun, start_engine
from tsvk_tools.serve.serving_config import ServingRequest, write_config


@contextlib.contextmanager
def running_engine(request: ServingRequest, workdir: Path, timeout: float = 300) -> Iterator[EngineRun]:
    """Generate the config, start the engine on it, wait until /ping is healthy, always stop."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "engine.properties"
    write_config(request, config)
    run = start_engine(config, workdir / "engine-run")
    try:
        run.wait_ready(timeout=timeout)
        yield run
    finally:
        run.stop(drain_timeout=5)
