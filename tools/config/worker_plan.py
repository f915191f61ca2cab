"""How many workers each model gets on the CPU when the user does not say: single-threaded workers, one per
vCPU of the model's share, as many as memory holds.

Measured on 2 vCPUs (docs/benchmarks.md, "The rule and the tune"): N workers x 1 thread served more than
1 worker x N threads for every model tried, classifiers small and large and detectors, because a
worker's torch threads meet at every operator and wait for the slowest, while single-threaded workers
never wait for each other. The price is memory: each worker holds its own model. So the count is
bounded by the memory TorchServe may use (`--memory-mb`, else the cgroup limit, else the machine's), with
each worker estimated from its archive's size; where memory runs short, the model with the most memory
gives up a worker first, and the vCPUs left over become more threads per worker.
"""

from __future__ import annotations

from pathlib import Path

from .. import defaults

from .memory_limits import cgroup_limit_mb, machine_memory_mb, memory_cap_mb


def worker_estimate_mb(archive: Path) -> float:
    """One CPU worker's memory: the runtime plus a multiple of what its archive holds."""
    return defaults.WORKER_RUNTIME_MB + defaults.WORKER_ARCHIVE_FACTOR * archive.stat().st_size / 2**20


def memory_budget_mb(requested_mb: int | None) -> tuple[float, str]:
    """The memory TorchServe may use, and where the number comes from."""
    return memory_cap_mb(requested_mb, cgroup_limit_mb(), machine_memory_mb())


def cpu_workers(shares: dict[str, int], estimates_mb: dict[str, float], budget_mb: float) -> dict[str, int]:
    """Per model, its vCPU share in single-threaded workers, reduced until the frontend and every worker fit
    `budget_mb` (never below one worker per model)."""
    workers = dict(shares)

    def total() -> float:
        return defaults.FRONTEND_MB + sum(workers[name] * estimates_mb[name] for name in workers)

    while total() > budget_mb:
        shrinkable = [name for name in workers if workers[name] > 1]
        if not shrinkable:
            break
        workers[max(shrinkable, key=lambda name: workers[name] * estimates_mb[name])] -= 1
    return workers
