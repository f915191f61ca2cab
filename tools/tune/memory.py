"""The memory a tune may use, and what a candidate will use before it is started.

Each TorchServe worker holds its own copy of the model and its activations, so memory grows with the
workers: ResNet-152 with 2 workers x 1 thread peaked at 1.9x the memory of 1 worker x 2 threads here
(benchmarks/results/workers-resnet152.txt). A candidate's memory is estimated from what was measured:
the frontend's peak plus, per model, its workers x the largest peak RSS one of its workers reached,
plus a margin. A candidate whose estimate exceeds the cap is never started.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .. import defaults
from .space import Candidate

CGROUP_V2 = Path("/sys/fs/cgroup/memory.max")
CGROUP_V1 = Path("/sys/fs/cgroup/memory/memory.limit_in_bytes")
_NO_LIMIT_V1 = 2**60  # cgroup v1 writes a huge number (page-rounded LONG_MAX) for "no limit"


def cgroup_limit_mb(v2: Path = CGROUP_V2, v1: Path = CGROUP_V1) -> float | None:
    """The container's memory limit, MiB; None where there is none (or no cgroup file)."""
    for path in (v2, v1):
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text == "max":
            return None
        try:
            value = int(text)
        except ValueError:
            continue
        return None if value >= _NO_LIMIT_V1 else value / 2**20
    return None


def memory_cap_mb(requested_mb: float | None, cgroup_mb: float | None, machine_mb: float) -> tuple[float, str]:
    """The tightest of what was asked, the cgroup limit and the machine's memory, and where it comes from."""
    limits = [(machine_mb, "the machine's memory")]
    if cgroup_mb is not None:
        limits.append((cgroup_mb, "the cgroup limit (memory.max)"))
    if requested_mb is not None:
        limits.append((float(requested_mb), "--memory-mb"))
    return min(limits)


def machine_memory_mb() -> float:
    import psutil

    return psutil.virtual_memory().total / 2**20


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
