"""Whichever engine `tsvk serve` started from a run directory: the commands that talk to a running server
(`stop`, `status`, `predict`, `keys`) find it here."""

from __future__ import annotations

from pathlib import Path

from .. import defaults
from ..serve.server import TorchServeRun, find_running, start_torchserve
from .kserve.engine_process import find_engine, start_engine

# Each engine of defaults.ENGINES: what to call it when starting it, and how it starts on a config and run dir.
STARTS = {"torchserve": ("TorchServe", start_torchserve), "kserve": ("tsvk's engine (kserve, no Java)", start_engine)}


def find_serving(run_dir: Path) -> TorchServeRun | None:
    """The engine's run (an EngineRun) or TorchServe's, started from `run_dir` and still ours; None when neither runs."""
    return find_engine(run_dir) or find_running(run_dir)


def engine_of(run: TorchServeRun) -> str:
    return getattr(run, "engine", "torchserve")


def engine_label(engine: str) -> str:
    return STARTS[engine][0]


def start_serving(engine: str, config: Path, run_dir: Path, allocator: str = defaults.ALLOCATOR) -> TorchServeRun:
    """Start `engine` on `config` in the background from `run_dir`; the run answers wait_ready and stop either way."""
    return STARTS[engine][1](config, run_dir, allocator=allocator)
