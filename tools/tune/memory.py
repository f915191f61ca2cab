"""The memory a tune may use, and what a candidate will use before it is started.

Each TorchServe worker holds its own copy of the model and its activations, so memory grows with the
workers: ResNet-152 with 2 workers x 1 thread peaked at 1.9x the memory of 1 worker x 2 threads here
(benchmarks/results/workers-resnet152.txt). A candidate's memory is estimated from what was measured:
the frontend's peak plus, per model, its workers x the largest peak RSS one of its workers reached,
plus a margin. A candidate whose estimate exceeds the cap is never started.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import defaults
from .space import Candidate

@dataclass
class MemoryModel:
    """Peak RSS learnt from measured candidates: the frontend's, and one worker's per model."""

    margin: float = defaults.TUNE_MEMORY_MARGIN
    frontend_mb: float = 0.0
    worker_mb: dict[str, float] = field(default_factory=dict)

    def learn(self, frontend_mb: float | None, worker_mb: dict[str, float]) -> None:
        self.frontend_mb = max(self.frontend_mb, frontend_mb or 0.0)
        for name, mb in worker_mb.items():
            self.worker_mb[name] = max(self.worker_mb.get(name, 0.0), mb)

    def estimate_mb(self, candidate: Candidate) -> float | None:
        """None until every model of the candidate has had a worker measured."""
        if any(name not in self.worker_mb for name, _ in candidate.models):
            return None
        workers = sum(config.workers * self.worker_mb[name] for name, config in candidate.models)
        return round((self.frontend_mb + workers) * (1 + self.margin), 1)
