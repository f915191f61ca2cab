"""Watch a running TorchServe from outside: its workers' pids and readiness, memory, open files.

Workers are found through the management API (pid per worker), or on tsvk's own engine, which has none, in the
status file it rewrites whenever a worker starts or dies; so a worker that died and was replaced shows as a new pid.
Memory and file descriptors are read with psutil over the process
tree of the TorchServe we started; nothing here signals a process except `kill_worker`, which
checks first that the pid is a worker inside our own TorchServe's process group.
"""

from __future__ import annotations

import os
import re
import signal
import time
from dataclasses import dataclass, field

import psutil

from ...measure.sampler import Periodic
from ...engines.registry import engine_of
from ...engines.kserve.files import WORKER_MARKER as ENGINE_WORKER_MARKER
from ...engines.kserve.engine_process import SERVER_MODULE as ENGINE_SERVER_MODULE
from ...engines.torchserve.server import WORKER_MARKER, TorchServeRun, group_is_ours


class WorkersUnknown(RuntimeError):
    """The management API did not list the model's workers: what they are is not known."""


def workers(run: TorchServeRun, model: str) -> list[dict]:
    """[{'pid': ..., 'status': 'READY'|...}, ...] as the engine lists them (TorchServe's management API, the engine's
    status file); WorkersUnknown when it does not say (an empty list would read as "no workers", and "none died" would
    then hold unproven)."""
    listed = engine_of(run).models(run)
    if isinstance(listed, dict):
        raise WorkersUnknown(f"the workers of {model} are not known: {listed.get('error')}")
    try:
        return next(m for m in listed if m["name"] == model)["workers"]
    except (StopIteration, KeyError, TypeError) as err:
        raise WorkersUnknown(f"the engine did not list the workers of {model}: {err!r}") from err


def worker_pids(run: TorchServeRun, model: str) -> set[int] | None:
    """The pids of `model`'s workers; None when the management API did not answer."""
    try:
        return {w["pid"] for w in workers(run, model) if w.get("pid")}
    except WorkersUnknown:
        return None


def ready_pids(run: TorchServeRun, model: str) -> set[int]:
    """READY workers' pids; empty while the management API does not answer (a poll asks again)."""
    try:
        return {w["pid"] for w in workers(run, model) if w.get("status") == "READY" and w.get("pid")}
    except WorkersUnknown:
        return set()


def wait_all_ready(run: TorchServeRun, model: str, count: int, timeout: float, avoid: set[int] = frozenset()) -> float | None:
    """Seconds until `count` workers are READY and none of them has a pid in `avoid`; None on timeout."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        pids = ready_pids(run, model)
        if len(pids) >= count and not pids & avoid:
            return time.monotonic() - started
        time.sleep(0.2)
    return None


def kill_worker(run: TorchServeRun, pid: int) -> None:
    """SIGKILL one worker of our own TorchServe (the fault being tested); refuses any other pid."""
    if not group_is_ours(run.pid, run.started_at) or os.getpgid(pid) != run.pid:
        raise RuntimeError(f"pid {pid} is not a worker of the TorchServe started here; not signalled")
    os.kill(pid, signal.SIGKILL)


def logged_worker_starts(run: TorchServeRun, model: str) -> int:
    """The highest worker start number the handler logged for `model` (see tsvk.worker.worker_starts)."""
    pattern = re.compile(rf"tsvk worker start (\d+) for {re.escape(model)} ")
    try:
        text = (run.run_dir / "logs" / "model_log.log").read_text(errors="replace")
    except OSError:
        return 0
    return max((int(m.group(1)) for m in pattern.finditer(text)), default=0)


def tree(run: TorchServeRun) -> list[psutil.Process]:
    try:
        root = psutil.Process(run.pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


@dataclass
class ProcessSample:
    at: float
    rss_mb: dict[str, float]  # "frontend" / "worker <pid>" / other names -> RSS MiB
    fds: dict[str, int]


def named(run: TorchServeRun, extra: list[psutil.Process] = ()) -> dict[str, psutil.Process]:
    """Our TorchServe's processes (and `extra`) by role: "frontend", "worker <pid>", ..."""
    processes = {}
    for process in [*tree(run), *extra]:
        try:
            processes[_role(process)] = process
        except psutil.Error:
            continue
    return processes


def sample(run: TorchServeRun, extra: list[psutil.Process] = ()) -> ProcessSample:
    rss, fds = {}, {}
    for name, process in named(run, extra).items():
        try:
            rss[name] = process.memory_info().rss / 2**20
            fds[name] = process.num_fds()
        except psutil.Error:
            continue
    return ProcessSample(time.monotonic(), rss, fds)


def _role(process: psutil.Process) -> str:
    words = " ".join(process.cmdline())
    if WORKER_MARKER in words or ENGINE_WORKER_MARKER in words:
        return f"worker {process.pid}"
    if "org.pytorch.serve.ModelServer" in words or ENGINE_SERVER_MODULE in words:
        return "frontend"
    if "tsvk_tools.keys" in words:
        return "key renewer"
    return f"{process.name()} {process.pid}"


def worker_rss(run: TorchServeRun) -> dict[str, float]:
    """ "worker <pid>" -> RSS MiB of every worker of our TorchServe (empty when none is found)."""
    return {name: mb for name, mb in sample(run).rss_mb.items() if name.startswith("worker")}


def model_worker_rss(run: TorchServeRun, model: str) -> dict[str, float]:
    """`worker_rss` of `model`'s workers alone, as its engine lists them: another model's workers may still be warming
    up (a detector's first answers grow it by hundreds of MiB), which says nothing of what `model` was sent."""
    listed = engine_of(run).models(run)
    pids = set() if isinstance(listed, dict) else {w.get("pid") for m in listed if m.get("name") == model for w in m.get("workers", [])}
    return {name: mb for name, mb in worker_rss(run).items() if int(name.split()[-1]) in pids}


@dataclass
class PeakTotalRss(Periodic):
    """Samples the RSS of the whole server (every process of our TorchServe or engine, and `extra`) in the background:
    `growth_mb` is the largest total seen beyond the total when sampling began."""

    run: TorchServeRun
    extra: list = field(default_factory=list)
    interval: float = 0.05
    before_mb: float = 0.0
    peak_mb: float = 0.0

    def __enter__(self):
        self.before_mb = self.peak_mb = self.total_mb()
        return super().__enter__()

    def total_mb(self) -> float:
        return sum(sample(self.run, self.extra).rss_mb.values())

    def tick(self) -> None:
        self.peak_mb = max(self.peak_mb, self.total_mb())

    @property
    def growth_mb(self) -> float:
        return self.peak_mb - self.before_mb


@dataclass
class PeakRssByProcess(Periodic):
    """Samples the RSS of each process of the server by role ("frontend", "worker <pid>", ...) in the background: a
    bound per process (the frontend's, each worker's) is judged on that process's own peak, which a total hides.
    `before_mb` is each role's RSS when sampling began; `peaks_mb` the largest seen, roles that appeared later included."""

    run: TorchServeRun
    interval: float = 0.05
    before_mb: dict = field(default_factory=dict)
    peaks_mb: dict = field(default_factory=dict)
    samples: int = 0

    def __enter__(self):
        self.before_mb = dict(sample(self.run).rss_mb)
        self.peaks_mb = dict(self.before_mb)
        return super().__enter__()

    def tick(self) -> None:
        for name, mb in sample(self.run).rss_mb.items():
            self.peaks_mb[name] = max(mb, self.peaks_mb.get(name, 0.0))
        self.samples += 1


@dataclass
class PeakWorkerRss(PeakRssByProcess):
    """PeakRssByProcess read for the workers: `peak_mb` is the largest single worker seen ("worker <pid>" in `peaks_mb`)."""

    interval: float = 0.1

    @property
    def peak_mb(self) -> float:
        return max((mb for name, mb in self.peaks_mb.items() if name.startswith("worker")), default=0.0)
