"""CPU and resident memory of everything a system runs, sampled from the process tree.

One system runs at a time and every process of it descends from this (harness) process, while the
load generator runs in this process itself; so "all descendants" is exactly the system under test,
whatever shape it has (TorchServe's Java frontend and Python workers, gunicorn's workers, LitServe's
API and inference processes, or one short-lived process per job).

Each sample also splits the CPU by process kind (the program or script each process runs), with the load
generator, this process, beside them: that says where a system's CPU goes per image (the frontend, the
workers, the clients), which its total alone cannot.
"""

from __future__ import annotations

import os
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import psutil


@dataclass(frozen=True)
class Sample:
    at: float  # time.monotonic()
    cpu_pct: float  # summed over processes; 100 = one vCPU busy
    rss_mb: float  # summed resident memory
    processes: int
    cpu_pct_by_process: dict[str, float] = field(default_factory=dict)  # process kind -> CPU %, the load generator too


LOAD_GENERATOR = "load generator"  # the harness process: its client threads send the load
INTERPRETER = "python"  # python, python3, python3.11: the kind is the script or module it runs


def process_kind(cmdline: list[str], name: str) -> str:
    """What a process runs, as a short name: the script or module a Python interpreter runs
    (model_service_worker.py, litserve_openvino_app), else the program's own name (java, tritonserver)."""
    program = Path(cmdline[0]).name if cmdline else name
    if not program.startswith(INTERPRETER):
        return program
    arguments = iter(cmdline[1:])
    for argument in arguments:
        if argument == "-m":
            return next(arguments, program).rsplit(".", 1)[-1]
        if argument == "-c":
            return program  # a program given on the command line: nothing names it
        if not argument.startswith("-"):
            return Path(argument).name
    return program


class Periodic:
    """Calls `tick()` every `interval` seconds on a background thread while used as a context manager."""

    interval: float = 0.2

    def tick(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=type(self).__name__, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.tick()
            self._stop.wait(self.interval)


@dataclass
class TreeSampler(Periodic):
    """Samples the descendants of `root_pid` every `interval` seconds in a background thread."""

    root_pid: int = field(default_factory=os.getpid)
    interval: float = 0.2
    samples: list[Sample] = field(default_factory=list)
    seen: dict[int, psutil.Process] = field(default_factory=dict)  # every process seen, kept to tell reused pids apart
    peak_rss_mb_by_pid: dict[int, float] = field(default_factory=dict)  # what each process reached (a worker's memory)

    def __post_init__(self):
        self._known: dict[int, psutil.Process] = {}
        self._harness = psutil.Process(self.root_pid)  # the load generator runs in it
        self._harness.cpu_percent(None)

    def tick(self) -> None:
        self.samples.append(self.sample())

    def sample(self) -> Sample:
        rss = 0.0
        alive = 0
        by_kind: dict[str, float] = defaultdict(float)
        for process in self._descendants():
            try:
                with process.oneshot():
                    busy = process.cpu_percent(None)  # since this process's previous sample
                    own = process.memory_info().rss
                    kind = process_kind(process.cmdline(), process.name())  # each time: a process may exec another program
                by_kind[kind] += busy
                rss += own
                self.peak_rss_mb_by_pid[process.pid] = max(self.peak_rss_mb_by_pid.get(process.pid, 0.0), own / 2**20)
                alive += 1
            except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
                continue
        cpu = sum(by_kind.values())
        by_kind[LOAD_GENERATOR] += self._harness.cpu_percent(None)  # beside the system, not part of its total
        return Sample(time.monotonic(), cpu, rss / 2**20, alive, dict(by_kind))

    def _descendants(self) -> list[psutil.Process]:
        """Cached Process objects, so cpu_percent measures from one sample to the next."""
        try:
            current = psutil.Process(self.root_pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        pids = {p.pid for p in current}
        self._known = {pid: proc for pid, proc in self._known.items() if pid in pids}
        for process in current:
            self._known.setdefault(process.pid, process)
        for pid, process in self._known.items():
            self.seen.setdefault(pid, process)
        return list(self._known.values())

    @property
    def seen_pids(self) -> set[int]:
        return set(self.seen)


def cpu_seconds(process: psutil.Process) -> float | None:
    """User + system CPU seconds of `process` so far; None once it is gone or unreadable."""
    try:
        times = process.cpu_times()
    except psutil.Error:
        return None
    return times.user + times.system


def window_stats(samples: list[Sample], start: float | None = None, end: float | None = None) -> dict[str, float | None]:
    """Peak and mean CPU %, peak RSS (MiB) of the samples taken within [start, end], and the mean CPU % of
    each kind of process (a kind missing from a sample was idle or not running then: 0)."""
    chosen = [s for s in samples if (start is None or s.at >= start) and (end is None or s.at <= end)]
    if not chosen:
        return {"peak_cpu_pct": None, "mean_cpu_pct": None, "peak_rss_mb": None, "mean_cpu_pct_by_process": {}}
    kinds = sorted({kind for s in chosen for kind in s.cpu_pct_by_process})
    return {
        "peak_cpu_pct": round(max(s.cpu_pct for s in chosen), 1),
        "mean_cpu_pct": round(sum(s.cpu_pct for s in chosen) / len(chosen), 1),
        "peak_rss_mb": round(max(s.rss_mb for s in chosen), 1),
        "mean_cpu_pct_by_process": {kind: round(sum(s.cpu_pct_by_process.get(kind, 0.0) for s in chosen) / len(chosen), 1)
                                    for kind in kinds},
    }


def leftover(processes: list[psutil.Process]) -> list[psutil.Process]:
    """Those of `processes` still running as the same process (a reused pid is another process, and
    zombies count as gone: they hold no resources)."""
    alive = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                alive.append(process)
        except psutil.NoSuchProcess:
            continue
    return alive
