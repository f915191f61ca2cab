"""Test helpers for tsvk's own engine (tools/engines/kserve): started on a generated config, always stopped."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

from tsvk_tools.engines.kserve.engine_process import EngineRun, start_engine
from tsvk_tools.config.serving_config import ServingRequest, write_config


@contextlib.contextmanager
def running_engine(request: ServingRequest, workdir: Path, timeout: float = 300,
                   extra_properties: dict[str, str] | None = None) -> Iterator[EngineRun]:
    """Generate the config (plus `extra_properties`, keys the generator does not write), start the engine on it, wait
    until /ping is healthy, always stop."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "engine.properties"
    write_config(request, config)
    with config.open("a") as properties:
        properties.writelines(f"{key}={value}\n" for key, value in (extra_properties or {}).items())
    run = start_engine(config, workdir / "engine-run")
    try:
        run.wait_ready(timeout=timeout)
        yield run
    finally:
        run.stop(drain_timeout=5)
