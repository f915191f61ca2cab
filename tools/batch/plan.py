"""How many batch workers, on what, with how many threads and what batch: the plan `tsvk config` makes for
serving the same archive (tools/config/serving_config.py), so offline and online run alike: one worker per
GPU where there are GPUs, else single-threaded workers, one per vCPU, as many as memory holds; the
archive's batch size.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..config.serving_config import ServingRequest, plan_serving


@dataclass(frozen=True)
class BatchPlan:
    model_name: str
    workers: int
    batch: int
    threads: int  # torch intra-op threads per worker
    gpus: int
    vcpus: int

    def gpu_of(self, worker: int) -> int | None:
        """The GPU a worker runs on (round-robin, as TorchServe assigns them), or None on the CPU."""
        return worker % self.gpus if self.gpus else None

    def describe(self) -> str:
        device = f"{self.gpus} GPU(s)" if self.gpus else "the CPU"
        return (f"{self.workers} worker(s) x {self.threads} thread(s) on {device} ({self.vcpus} vCPUs), "
                f"batches of {self.batch}")


def plan_batch(archive: Path, workers: int | None = None, vcpus: int | None = None, gpus: int | None = None,
               batch: int | None = None) -> BatchPlan:
    """The serving plan of this one archive; `None` decides from the machine and the archive, as `tsvk config` does."""
    request = ServingRequest(vcpus=vcpus, workers=workers, gpus=gpus, batch=batch, models=(archive.stem,),
                             model_store=archive.parent, auth=False)
    plan = plan_serving(request)
    model = plan.models[0]
    return BatchPlan(model.name, model.workers, model.batch, model.intra_op_threads, plan.gpus, plan.vcpus)
