"""Torch thread counts for one worker, decided by the generated TorchServe config.

Environment variables set after TorchServe starts never reach its workers, and TorchServe passes a
worker no custom settings. So `tsvk config` writes `tsvk.threads.<model>=<intra>,<inter>` into the
config.properties, and each worker finds that file the way TorchServe itself did: TS_CONFIG_FILE, else
the `-f` argument of the TorchServe (Java) process it descends from.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from ..common.properties import read_properties
from ..common.settings import RuntimeSettings

log = logging.getLogger(__name__)

THREADS_KEY_PREFIX = "tsvk.threads."
_FRONTEND_MAIN_CLASS = "org.pytorch.serve.ModelServer"


@dataclass(frozen=True)
class ThreadPlan:
    intra_op: int  # 0 = leave torch's default
    inter_op: int
    source: str  # where the numbers came from, for the load log line


def resolve_threads(runtime: RuntimeSettings, model_name: str, properties: Mapping[str, str] | None = None,
                    source: str = "") -> ThreadPlan:
    """Config first (it knows workers x vCPUs): `properties` as the server handed them or a file gave them (`source`
    says which), else the file TorchServe started on; then the archive's explicit value, then torch's default."""
    if properties is None and (config_path := find_torchserve_config()) is not None:
        properties, source = read_properties(config_path), f"config {config_path}"
    if properties is not None:
        planned = threads_from_config(properties, model_name)
        if planned is not None:
            return ThreadPlan(planned[0], planned[1], source)
    if runtime.intra_op_threads > 0:
        return ThreadPlan(runtime.intra_op_threads, runtime.inter_op_threads, "archive settings")
    return ThreadPlan(0, runtime.inter_op_threads, "torch default (no tsvk config found)")


def apply_threads(plan: ThreadPlan) -> None:
    """Set torch's thread pools; inter-op can only be set once per process, so failures are logged."""
    import torch

    if plan.intra_op > 0:
        torch.set_num_threads(plan.intra_op)
    try:
        torch.set_num_interop_threads(plan.inter_op)
    except RuntimeError as err:  # already set or parallel work already started in this process
        log.warning("could not set inter-op threads to %d: %s", plan.inter_op, err)


def threads_from_config(properties: Mapping[str, str], model_name: str) -> tuple[int, int] | None:
    raw = properties.get(THREADS_KEY_PREFIX + model_name)
    if raw is None:
        return None
    try:
        intra, _, inter = raw.partition(",")
        numbers = int(intra), int(inter or 1)
    except ValueError:
        log.warning("ignoring %s%s=%r: expected '<intra>,<inter>'", THREADS_KEY_PREFIX, model_name, raw)
        return None
    return numbers if min(numbers) >= 1 else None


def find_torchserve_config(pid: int | None = None) -> Path | None:
    """TS_CONFIG_FILE, else the `-f` file of the nearest ancestor that is TorchServe's frontend."""
    if os.environ.get("TS_CONFIG_FILE"):
        return Path(os.environ["TS_CONFIG_FILE"])
    pid = os.getppid() if pid is None else pid
    for _ in range(8):  # worker -> (cpu launcher) -> java; a few levels is plenty
        if pid <= 1:
            return None
        args = _cmdline(pid)
        if _FRONTEND_MAIN_CLASS in args and "-f" in args[:-1]:
            config = Path(args[args.index("-f") + 1])
            return config if config.is_absolute() else Path(f"/proc/{pid}/cwd") / config
        pid = _parent_pid(pid)
    return None


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _parent_pid(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat.rsplit(")", 1)[1].split()[1])
