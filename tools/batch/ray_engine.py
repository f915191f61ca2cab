"""`--ray`: the same rows, computed on Ray Data. The ids of the inputs not yet done stream from
`ray.data.range`, and a pool of actors, each holding the loaded archive (one per `threads` CPUs, or one per
GPU), scores them in the archive's batches; the driver writes the rows as they arrive, exactly as a local run
does, so a run started locally can be resumed on Ray and the other way round.

Every node reads the run's folder (the list of inputs and the unpacked archive) and the inputs themselves:
on one machine that holds as it is; on a cluster, put the output's folder and the photos on storage every
node mounts at the same path, or list URLs (k8s/ray/README.md).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, replace
from typing import Callable

import numpy as np

from ..extras import missing_extra
from .plan import BatchPlan
from .ray_actor import ArchiveActor, not_done
from .scorer import WorkerSpec
from .state import DoneIds, RunState

LOCAL = "local"
# Ray Data blocks of about this many bytes: a block of ids (8 bytes each) or of rows leaves its stage once full,
# so small blocks keep rows flowing to the driver a few batches at a time (Ray's default, 128 MiB, would hold an
# actor's rows until it had scored a whole block of input, and a stop would lose all of it).
BLOCK_BYTES = 4096
# How long a starting node waits for its agents (ms). Ray's default (about a minute) fails a `--ray local` start
# on a busy machine: the raylet gives up waiting for the metrics agent's port file and the start fails.
AGENT_WAIT_MS = "600000"
# The priority of the Ray workers (the actors) of a `--ray local` run. Ray starts its workers at niceness 15 to keep
# its own daemons responsive on a shared node; a Ray started for this run alone gives its actors the CPU the local
# worker processes would have, so that anything else on the machine does not take it from them first.
LOCAL_WORKER_NICENESS = "0"
ID_TASKS = 1  # tasks at once making and filtering the ids: integers, far faster than any actor scores them
# The ids are read as one block stream by one task (Ray Data pauses it while the actors are behind). Ray Data's
# default, many read tasks, paid a task start each and deserialized the done-bitmap again: the actors had 85% of a
# 2-vCPU machine's CPU with them (int8 ResNet-50, 60 s windows), 89-90% with one task.
ID_READ_BLOCKS = 1


def import_ray():
    try:
        import ray
        import ray.data  # noqa: F401 - Ray Data is an extra of ray
    except ImportError as err:
        raise missing_extra("--ray (Ray Data)", "ray", err) from None
    return ray


def connect(ray, address: str, plan: BatchPlan) -> None:
    """Join the cluster at `address`, or start a Ray of this machine's vCPUs in this process (`local`)."""
    if ray.is_initialized():
        return
    if address == LOCAL:
        os.environ.setdefault("RAY_agent_register_timeout_ms", AGENT_WAIT_MS)
        os.environ.setdefault("RAY_worker_niceness", LOCAL_WORKER_NICENESS)
        ray.init(num_cpus=plan.vcpus, num_gpus=plan.gpus, include_dashboard=False, log_to_driver=False)
    else:
        ray.init(address=address, log_to_driver=False)


@dataclass(frozen=True)
class ActorPlan:
    """How many actors hold the archive, what each reserves of the cluster, and the device it runs on."""

    actors: int
    num_cpus: float
    num_gpus: float
    gpu_id: int | None  # Ray gives each GPU actor its own GPU as cuda:0 (CUDA_VISIBLE_DEVICES)


def plan_actors(resources: dict, threads: int) -> ActorPlan:
    """One actor per GPU of the cluster where it has GPUs, else one per `threads` of its CPUs (at least one), as
    the serving plan gives single-threaded CPU workers one per vCPU."""
    gpus = int(resources.get("GPU", 0))
    if gpus:
        return ActorPlan(gpus, 0, 1, 0)
    return ActorPlan(max(1, int(resources.get("CPU", 1)) // threads), threads, 0, None)


def id_range(ray, count: int):
    """`ray.data.range(count)` whose read tasks reserve no CPU: they only make integers, and with every CPU held by
    an actor, reads that wait for a CPU would never run (Ray Data warns the job may hang forever). The same
    datasource `ray.data.range` reads (ray/data/read_api.py, 2.60), read with num_cpus=0 by one task: a task that
    reserves nothing is otherwise started as often as Ray has blocks to make, each in a worker process of its own,
    and on a small machine those processes take the CPUs from the actors."""
    from ray.data._internal.datasource.range_datasource import RangeDatasource

    return ray.data.read_datasource(RangeDatasource(n=count, block_format="arrow", column_name="id"), num_cpus=0,
                                    concurrency=ID_TASKS, override_num_blocks=ID_READ_BLOCKS)


def score_on_ray(address: str, spec: WorkerSpec, plan: BatchPlan, state: RunState, done: DoneIds,
                 write: Callable[[list[str]], None]) -> None:
    ray = import_ray()
    connect(ray, address, plan)
    try:
        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False  # the run's own progress line shows it
        context.target_max_block_size = BLOCK_BYTES
        context.memory_usage_poll_interval_s = None  # each task's thread reading its USS from smaps every second
        actors = plan_actors(ray.cluster_resources(), plan.threads)
        spec = replace(spec, gpu_id=actors.gpu_id)
        bits = np.frombuffer(bytes(done.bits), dtype=np.uint8)
        ids = id_range(ray, done.count).map_batches(not_done, fn_kwargs={"done_bits": bits}, batch_format="numpy", num_cpus=0,
                                                    concurrency=ID_TASKS)
        rows = ids.map_batches(ArchiveActor, fn_constructor_kwargs={"spec": asdict(spec), "state_folder": str(state.folder)},
                               batch_size=plan.batch, batch_format="numpy", compute=ray.data.ActorPoolStrategy(size=actors.actors),
                               num_cpus=actors.num_cpus, num_gpus=actors.num_gpus)
        for batch in rows.iter_batches(batch_size=None, batch_format="numpy"):
            write([str(row) for row in batch["row"]])
    finally:
        ray.shutdown()
