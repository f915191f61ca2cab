"""The Ray Data side of a batch run: each actor holds the loaded archive (scorer.py) and turns a block of input
ids into rows. Kept apart from ray_engine.py and importing nothing of `tsvk`, so a Ray worker that unpickles
the actor class imports the archive's own `tsvk`, as a TorchServe worker does."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .scorer import ArchiveScorer, WorkerSpec
from .state import InputList, RunState


class ArchiveActor:
    """`map_batches` callable class: loads the archive once per actor, then scores each batch of ids."""

    def __init__(self, spec: dict, state_folder: str):
        self.scorer = ArchiveScorer(WorkerSpec(**spec))
        self.listing = InputList(RunState(Path(state_folder)))

    def __call__(self, batch: dict) -> dict:
        ids = [int(i) for i in batch["id"]]
        rows = self.scorer.score(ids, self.listing.sources(ids))
        return {"row": np.array(rows, dtype=object)}


def not_done(batch: dict, done_bits: np.ndarray) -> dict:
    """The ids of the batch whose rows are not in the output yet (one bit per id, little-endian within a byte)."""
    ids = batch["id"]
    done = (done_bits[ids // 8] >> (ids % 8)) & 1
    return {"id": ids[done == 0]}
