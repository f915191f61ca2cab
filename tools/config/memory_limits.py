"""How much memory this machine lets TorchServe use: the container's cgroup limit, the machine's memory,
and what the user asked for, whichever is tightest. `tsvk config` plans workers within it
(tools/config/worker_plan.py) and `tsvk tune` never starts a candidate estimated beyond it (tools/tune/memory.py)."""

from __future__ import annotations

from pathlib import Path

import psutil

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
    return psutil.virtual_memory().total / 2**20
