"""Where each soak minute's CPU went, and how long TorchServe itself took to answer.

A p99 that rises late in a soak has three kinds of cause: the service got slower per request (a
leak's cost, a slower allocator), something outside the service took the cores (another job, the
hypervisor's steal), or the client measuring it got slower (its own threads and garbage). The
figures here tell them apart: the worker's CPU milliseconds per answer, the machine's CPU split
into service / soak client / everything else / stolen, and the latency TorchServe's access log
records for the same requests (the frontend's own clock: a slow client does not move it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import psutil

from ...measure.sampler import cpu_seconds

ACCESS_LOG = Path("logs") / "access_log.log"
# TorchServe's access log line ends with the status and the milliseconds the frontend spent on it:
#   ... "POST /predictions/resnet18 HTTP/1.1" 200 187
_ANSWERED = re.compile(r'"POST /predictions/(?P<model>[^/ "]+)[^"]*" (?P<status>\d{3}) (?P<ms>\d+)\s*$')


@dataclass(frozen=True)
class CpuClock:
    """Cumulative CPU seconds at one instant: the machine's busy and stolen time, and per process."""

    busy_s: float  # user + nice + system + irq + softirq over every core (guest time is inside user)
    steal_s: float  # taken by the hypervisor for other guests
    cores: int
    wall_s: float
    process_s: dict[str, float]  # role name -> user + system of that process


def read_clock(processes: dict[str, psutil.Process], wall_s: float) -> CpuClock:
    times = psutil.cpu_times()
    busy = times.user + times.nice + times.system + getattr(times, "irq", 0.0) + getattr(times, "softirq", 0.0)
    own = {name: cpu_seconds(process) for name, process in processes.items()}
    per_process = {name: seconds for name, seconds in own.items() if seconds is not None}
    return CpuClock(busy, getattr(times, "steal", 0.0), psutil.cpu_count() or 1, wall_s, per_process)


def cpu_split(before: CpuClock, after: CpuClock, client: str) -> dict[str, float]:
    """Percent of the machine's cores over the interval: service (every process but `client`), the
    client, everything outside both, and stolen. A process missing from either clock counts 0."""
    capacity = max(1e-9, (after.wall_s - before.wall_s) * after.cores)
    spent = {name: after.process_s[name] - before.process_s.get(name, 0.0)
             for name in after.process_s if name in before.process_s}
    client_s = spent.pop(client, 0.0)
    service_s = sum(spent.values())
    busy_s = after.busy_s - before.busy_s
    return {
        "service": _pct(service_s, capacity), "client": _pct(client_s, capacity),
        "outside": _pct(max(0.0, busy_s - service_s - client_s), capacity),
        "steal": _pct(after.steal_s - before.steal_s, capacity),
    }


def worker_cpu_ms(before: CpuClock, after: CpuClock) -> float:
    """CPU milliseconds the workers spent over the interval (workers present in both clocks)."""
    return sum(after.process_s[n] - before.process_s[n] for n in after.process_s
               if n.startswith("worker") and n in before.process_s) * 1e3


def _pct(seconds: float, capacity: float) -> float:
    return round(100 * seconds / capacity, 1)


class AccessLogTail:
    """Reads the access log lines written since the last call: the frontend's ms per answered POST."""

    def __init__(self, run_dir: Path, model: str):
        self.path, self.model = Path(run_dir) / ACCESS_LOG, model
        self.offset = self._size()

    def _size(self) -> int:
        try:
            return self.path.stat().st_size
        except OSError:
            return 0

    def new_answers(self) -> list[tuple[int, int]]:
        """(status, ms) of each prediction logged since the last call, whole lines only."""
        try:
            with self.path.open("rb") as log:
                log.seek(self.offset)
                chunk = log.read()
        except OSError:
            return []
        complete = chunk[: chunk.rfind(b"\n") + 1]
        self.offset += len(complete)
        answers = []
        for line in complete.decode(errors="replace").splitlines():
            match = _ANSWERED.search(line)
            if match and match["model"] == self.model:
                answers.append((int(match["status"]), int(match["ms"])))
        return answers
