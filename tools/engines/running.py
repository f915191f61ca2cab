"""Whichever engine `tsvk serve` started from a run directory: the commands that talk to a running server
(`stop`, `status`, `predict`, `keys`) find it here."""

from __future__ import annotations

from pathlib import Path

from ..serve.server import TorchServeRun, find_running
from .kserve.engine_process import find_engine


def find_serving(run_dir: Path) -> TorchServeRun | None:
    """The engine's run (an EngineRun) or TorchServe's, started from `run_dir` and still ours; None when neither runs."""
    return find_engine(run_dir) or find_running(run_dir)


def engine_of(run: TorchServeRun) -> str:
    return getattr(run, "engine", "torchserve")
