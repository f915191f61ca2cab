"""How many CPUs this process may really use: the affinity mask and the cgroup quota, not the host.

A container limited to 2 CPUs on a 64-core host must plan for 2; `os.cpu_count()` says 64.
"""

from __future__ import annotations

import math
import os
from pathlib import Path


def detect_vcpus(cgroup_root: str | os.PathLike = "/sys/fs/cgroup") -> int:
    """The smaller of the CPUs in our affinity mask and the cgroup CPU quota (at least 1)."""
    candidates = [_affinity_count()]
    quota = cgroup_cpu_quota(Path(cgroup_root))
    if quota is not None:
        candidates.append(max(1, math.ceil(quota)))
    return max(1, min(candidates))


def cgroup_cpu_quota(root: Path) -> float | None:
    """CPUs allowed by the cgroup (v2 `cpu.max`, else v1 `cpu.cfs_quota_us`), or None when unlimited."""
    v2 = _read(root / "cpu.max")
    if v2:
        quota, _, period = v2.partition(" ")
        return None if quota == "max" else _ratio(quota, period or "100000")
    for v1_dir in (root / "cpu", root / "cpu,cpuacct", root):
        quota = _read(v1_dir / "cpu.cfs_quota_us")
        if quota:
            return None if quota.startswith("-") else _ratio(quota, _read(v1_dir / "cpu.cfs_period_us") or "100000")
    return None


def _affinity_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _ratio(quota: str, period: str) -> float | None:
    try:
        value = int(quota) / int(period)
    except (ValueError, ZeroDivisionError):
        return None
    return value if value > 0 else None


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""
