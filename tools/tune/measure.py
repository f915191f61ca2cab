"""One candidate on a real TorchServe: its config written by the config generator, its load from the
benchmark's closed-loop load generator, its memory and CPU from the benchmark's process-tree sampler.

The config differs from what `tsvk tune` finally writes only in its ports (free localhost ports, so
a tune never collides with a running service) and in token authorization (off: the load generator
sends no key, and checking one costs nothing measurable). Each model is driven by its own clients
at the same time, since the models share the cores. The load runs for a fixed time in two windows:
the first (a third) decides whether the candidate clearly loses and stops there.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import requests

from .. import progress
from ..bench.loadgen import HttpTarget, RequestRecord, run_closed_loop
from ..bench.sampler import TreeSampler, window_stats
from ..bench.stats import latency_summary
from ..bench.systems.base import identity
from ..errors import UsageError
from ..serve.ports import serving_on_free_ports
from ..serve.server import UNIX_SOCKET_PATH_MAX, TorchServeRun, start_torchserve, worker_socket_overflow
from ..serve.serving_config import ModelChoice, ServingPlan, plan_with_choices, write_plan
from .search import Measurement
from .space import Candidate

FIRST_WINDOW_SHARE = 1 / 3
WARMUP_ROUNDS = 2  # requests per client before the measured load: a fresh worker's first batches are slow
STOP_MARGIN_S = 15.0  # the load ends this long before the deadline, so stopping TorchServe fits in it
MIN_WINDOW_S = 3.0
ALL_AT_ONCE = 10**9  # a time-bounded load: the clients stop at the window's end, not at a count


@dataclass(frozen=True)
class Bench:
    """What every candidate of one tune shares."""

    model_store: Path
    vcpus: int
    work_dir: Path
    photos: tuple[bytes, ...]
    window_s: float
    concurrency: int | None = None  # fixed clients per model; None: 2 x workers x batch (one batch computing, one filling)


def concurrency_of(bench: Bench, candidate: Candidate) -> dict[str, int]:
    return {name: bench.concurrency or 2 * c.workers * c.batch for name, c in candidate.models}


def candidate_plan(bench: Bench, candidate: Candidate, **request_fields) -> ServingPlan:
    """The generator's plan for the candidate: the same config `tsvk tune` writes, on free ports."""
    request = serving_on_free_ports(vcpus=bench.vcpus, models=tuple(n for n, _ in candidate.models), model_store=bench.model_store,
                                    auth=False, concurrency=sum(concurrency_of(bench, candidate).values()), **request_fields)
    return plan_with_choices(request, choices_of(candidate), origin="tsvk tune")


def choices_of(candidate: Candidate, notes: dict[str, str] | None = None) -> dict[str, ModelChoice]:
    return {name: ModelChoice(c.workers, c.intra, c.inter, c.batch, c.delay_ms, (notes or {}).get(name, ""))
            for name, c in candidate.models}


def candidate_dir(bench: Bench, number: int) -> Path:
    return bench.work_dir / f"c{number:02d}"


def socket_path_problem(work_dir: Path) -> str | None:
    """Why TorchServe's workers could not open their sockets under `work_dir`, or None."""
    overflow = worker_socket_overflow(Path(work_dir).resolve() / "c00" / "run")
    if overflow is None:
        return None
    longest, size = overflow
    return (f"--work-dir {work_dir} is too deep: TorchServe's workers would listen on {longest} ({size} characters; "
            f"a Unix socket path holds at most {UNIX_SOCKET_PATH_MAX}); use a shorter directory")


def measure_candidate(bench: Bench, number: int, candidate: Candidate, stop_rule: Callable[[Measurement], str],
                      deadline: float) -> Measurement:
    """Start, warm up, load, stop; every failure becomes the measurement's error, never an exception."""
    began = time.monotonic()
    folder = candidate_dir(bench, number)
    folder.mkdir(parents=True, exist_ok=True)
    sampler = TreeSampler()
    try:
        with sampler:
            measured = _served(bench, folder, candidate, stop_rule, deadline, sampler)
    except UsageError as err:
        measured = Measurement(error=str(err)[:2000])
    measured.seconds = round(time.monotonic() - began, 1)
    measured.peak_rss_mb = window_stats(sampler.samples)["peak_rss_mb"]  # start-up peaks count too
    return measured


def _served(bench: Bench, folder: Path, candidate: Candidate, stop_rule, deadline: float, sampler: TreeSampler) -> Measurement:
    config = folder / "config.properties"
    write_plan(candidate_plan(bench, candidate), config)
    with progress.step(f"candidate {folder.name}: start TorchServe", "its frontend (Java)"):
        run = start_torchserve(config, folder / "run")
    try:
        with progress.step(f"candidate {folder.name}: load the models", "every model READY"):
            run.wait_ready([n for n, _ in candidate.models], timeout=max(1.0, deadline - STOP_MARGIN_S - time.monotonic()))
        load_end = deadline - STOP_MARGIN_S
        if load_end - time.monotonic() < 2 * MIN_WINDOW_S:
            return Measurement(error="cut at the deadline")
        with progress.step(f"candidate {folder.name}: measure", f"{candidate.describe()} under load"):
            return _loaded(bench, run, candidate, stop_rule, load_end, sampler)
    finally:
        run.stop()


def _loaded(bench: Bench, run: TorchServeRun, candidate: Candidate, stop_rule, load_end: float, sampler: TreeSampler) -> Measurement:
    targets = {name: HttpTarget(f"{run.url('inference')}/predictions/{name}", identity, timeout_s=max(1.0, load_end - time.monotonic()))
               for name, _ in candidate.models}
    clients = concurrency_of(bench, candidate)
    _warm_up(targets, bench.photos, clients, load_end - MIN_WINDOW_S)
    window = min(bench.window_s, load_end - time.monotonic())
    first = _window(targets, bench.photos, clients, time.monotonic() + FIRST_WINDOW_SHARE * window, sampler)
    measured = _summary(first, clients)
    measured.stopped_early = stop_rule(measured)
    if not measured.stopped_early:
        second = _window(targets, bench.photos, clients, min(load_end, first.started + window), sampler)
        measured = _summary(first.joined(second), clients)
    measured.frontend_rss_mb, measured.worker_rss_mb = _memory_by_role(run, [n for n, _ in candidate.models], sampler)
    return measured


@dataclass
class _Window:
    records: dict[str, list[RequestRecord]]
    started: float
    seconds: float
    mean_cpu_pct: float | None

    def joined(self, other: "_Window") -> "_Window":
        cpu = [c for c in (self.mean_cpu_pct, other.mean_cpu_pct) if c is not None]
        weights = (self.seconds, other.seconds)
        mean_cpu = sum(c * w for c, w in zip(cpu, weights)) / sum(weights) if len(cpu) == 2 and sum(weights) else (cpu or [None])[0]
        return _Window({n: self.records[n] + other.records[n] for n in self.records}, self.started,
                       self.seconds + other.seconds, mean_cpu)


def _window(targets, photos, clients, until: float, sampler: TreeSampler) -> _Window:
    started = time.monotonic()
    records = _load(targets, photos, clients, until)
    ended = time.monotonic()
    return _Window(records, started, ended - started, window_stats(sampler.samples, started, ended)["mean_cpu_pct"])


def _warm_up(targets: dict[str, HttpTarget], photos, clients: dict[str, int], until: float) -> None:
    """Each client sends WARMUP_ROUNDS requests, so every worker has run full batches before the clock starts
    (a fresh worker's first batches are slow), but never past `until`."""
    def drive(name: str) -> None:
        run_closed_loop(targets[name], photos, WARMUP_ROUNDS * clients[name], clients[name], until=until)

    _each_model(drive, targets)


def _each_model(drive: Callable[[str], None], names) -> None:
    threads = [threading.Thread(target=drive, args=(name,), name=f"load-{name}") for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _load(targets: dict[str, HttpTarget], photos, clients: dict[str, int], until: float) -> dict[str, list[RequestRecord]]:
    """Every model's clients at once (the models share the cores), until `until`."""
    records: dict[str, list[RequestRecord]] = {}

    def drive(name: str) -> None:
        records[name] = run_closed_loop(targets[name], photos, ALL_AT_ONCE, clients[name], until=until)

    _each_model(drive, targets)
    return records


def _summary(window: _Window, clients: dict[str, int]) -> Measurement:
    per_model = {}
    for name, records in window.records.items():
        ok = [r.latency_s for r in records if r.ok]
        latency = latency_summary(ok)
        per_model[name] = {"img_s": round(len(ok) / window.seconds, 2) if window.seconds else None, "p50_ms": latency["p50"],
                           "p99_ms": latency["p99"], "requests": len(records), "errors": len(records) - len(ok),
                           "concurrency": clients[name]}
    rates = [m["img_s"] for m in per_model.values()]
    worst = [m for m in per_model.values() if m["p99_ms"] is not None]
    return Measurement(
        img_s=round(sum(rates), 2) if all(r is not None for r in rates) else None,
        p50_ms=max((m["p50_ms"] for m in worst), default=None), p99_ms=max((m["p99_ms"] for m in worst), default=None),
        mean_cpu_pct=window.mean_cpu_pct, requests=sum(m["requests"] for m in per_model.values()),
        errors=sum(m["errors"] for m in per_model.values()), per_model=per_model,
    )


def _memory_by_role(run: TorchServeRun, models: list[str], sampler: TreeSampler) -> tuple[float, dict[str, float]]:
    """The frontend's peak (every process that is no model's worker) and, per model, its largest worker peak."""
    peaks = dict(sampler.peak_rss_mb_by_pid)
    workers = {name: _worker_pids(run, name) for name in models}
    per_model = {name: max((peaks.get(pid, 0.0) for pid in pids), default=0.0) for name, pids in workers.items()}
    all_workers = {pid for pids in workers.values() for pid in pids}
    frontend = sum(mb for pid, mb in peaks.items() if pid not in all_workers)
    return round(frontend, 1), {name: round(mb, 1) for name, mb in per_model.items() if mb}


def _worker_pids(run: TorchServeRun, model: str) -> list[int]:
    """TorchServe's describe-model answer names each worker's pid."""
    try:
        answer = requests.get(f"{run.url('management')}/models/{model}", headers=run.headers("management"), timeout=10)
        return [int(w["pid"]) for w in answer.json()[0].get("workers", []) if w.get("pid")]
    except (requests.RequestException, ValueError, KeyError, IndexError, TypeError):
        return []
