"""One candidate on a real TorchServe: its config written by the config generator, its load from the
benchmark's closed-loop load generator, its memory and CPU from the benchmark's process-tree sampler.

The config differs from what `tsvk tune` finally writes only in its ports (free localhost ports, so
a tune never collides with a running service) and in token authorization (off: the load generator
sends no key, and checking one costs nothing measurable). Each model is driven by its own clients
at the same time, since the models share the cores. The load runs for a fixed time in three windows,
each reported on its own so the spread shows: the first decides whether the candidate clearly loses
and stops there.

A comparison (`compare_with_rule`) serves the rule's plan and a contender side by side, each on its
own TorchServe, and loads them in turn with the same clients (rule, contender, contender, rule, ...:
a drift in the machine's load then falls on both alike), until a side has its pairs of windows or
the contender can no longer win.
"""

from __future__ import annotations

import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import requests

from .. import defaults, progress
from ..measure.loadgen import HttpTarget, RequestRecord, identity, run_closed_loop
from ..measure.sampler import TreeSampler, window_stats
from ..measure.stats import latency_summary
from ..errors import UsageError
from ..config.ports import serving_on_free_ports
from ..engines.torchserve.server import UNIX_SOCKET_PATH_MAX, TorchServeRun, start_torchserve, worker_socket_overflow
from ..config.plan import ModelChoice, ServingPlan
from ..config.rendering import write_plan
from ..config.serving_config import plan_with_choices
from .decide import Window
from .search import CUT_AT_DEADLINE, Comparison, Measurement
from .space import Candidate

WINDOWS = 3  # a candidate's load in this many windows of equal length; the first decides the early stop
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
    decision_window_s: float = 0.0  # each window of a comparison with the rule's plan
    decision_pairs: int = defaults.TUNE_DECISION_PAIRS  # windows per side in a comparison


def concurrency_of(bench: Bench, candidate: Candidate) -> dict[str, int]:
    return {name: bench.concurrency or 2 * c.workers * c.batch for name, c in candidate.models}


def candidate_plan(bench: Bench, candidate: Candidate, clients: dict[str, int] | None = None) -> ServingPlan:
    """The generator's plan for the candidate: the same config `tsvk tune` writes, on free ports."""
    clients = clients or concurrency_of(bench, candidate)
    request = serving_on_free_ports(vcpus=bench.vcpus, models=tuple(n for n, _ in candidate.models), model_store=bench.model_store,
                                    auth=False, concurrency=sum(clients.values()))
    return plan_with_choices(request, choices_of(candidate), origin="tsvk tune")


def choices_of(candidate: Candidate, notes: dict[str, str] | None = None) -> dict[str, ModelChoice]:
    return {name: ModelChoice(c.workers, c.intra, c.inter, c.batch, c.max_batch_delay_ms, (notes or {}).get(name, ""))
            for name, c in candidate.models}


def candidate_dir(bench: Bench, number: int) -> Path:
    return bench.work_dir / f"c{number:02d}"


def comparison_dir(work_dir: Path, number: int, side: str) -> Path:
    return work_dir / f"d{number:02d}-{side}"


def prune_unpacked_archives(work_dir: Path) -> None:
    """Every server's copy of the archives (TorchServe unpacks them into its run/tmp: the model's size again for
    each candidate and comparison) once the search has stopped them all; configs and logs stay for the report's
    readers."""
    for unpacked in Path(work_dir).glob("*/run/tmp"):
        shutil.rmtree(unpacked, ignore_errors=True)


def socket_path_problem(work_dir: Path) -> str | None:
    """Why TorchServe's workers could not open their sockets under `work_dir`, or None."""
    overflow = worker_socket_overflow(comparison_dir(Path(work_dir).resolve(), 0, "contender") / "run")  # the longest name
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
            return Measurement(error=CUT_AT_DEADLINE)
        with progress.step(f"candidate {folder.name}: measure", f"{candidate.describe()} under load"):
            return _loaded(bench, run, candidate, stop_rule, load_end, sampler)
    finally:
        run.stop()


def _loaded(bench: Bench, run: TorchServeRun, candidate: Candidate, stop_rule, load_end: float, sampler: TreeSampler) -> Measurement:
    targets = _targets(run, candidate, load_end)
    clients = concurrency_of(bench, candidate)
    _warm_up(targets, bench.photos, clients, load_end - MIN_WINDOW_S)
    share = min(bench.window_s, load_end - time.monotonic()) / WINDOWS
    windows = [_window(targets, bench.photos, clients, time.monotonic() + share, sampler)]
    first = _summary(windows[0], clients)
    first.stopped_early = stop_rule(first)
    if first.stopped_early:
        measured = first
    else:
        for number in range(2, WINDOWS + 1):
            windows.append(_window(targets, bench.photos, clients, min(load_end, windows[0].started + number * share), sampler))
        joined = windows[0]
        for window in windows[1:]:
            joined = joined.joined(window)
        measured = _summary(joined, clients)
    measured.windows = [_figures(window, clients) for window in windows]
    measured.load_s = round(sum(window.seconds for window in windows), 1)
    measured.frontend_rss_mb, measured.worker_rss_mb = _memory_by_role(run, [n for n, _ in candidate.models], sampler)
    return measured


def _targets(run: TorchServeRun, candidate: Candidate, load_end: float) -> dict[str, HttpTarget]:
    return {name: HttpTarget(f"{run.url('inference')}/predictions/{name}", identity, timeout_s=max(1.0, load_end - time.monotonic()))
            for name, _ in candidate.models}


def _figures(window: "_Window", clients: dict[str, int]) -> Window:
    summary = _summary(window, clients)
    return Window(summary.img_s or 0.0, summary.p99_ms, summary.requests, summary.errors,
                  {name: m["img_s"] or 0.0 for name, m in summary.per_model.items()}, round(window.seconds, 1))


def compare_with_rule(bench: Bench, number: int, rule: Candidate, contender: Candidate, settled, deadline: float) -> Comparison:
    """The rule's plan and the contender on two TorchServes at once, loaded in turn; every failure becomes the
    comparison's error, never an exception."""
    began = time.monotonic()
    clients = {name: max(concurrency_of(bench, rule)[name], concurrency_of(bench, contender)[name]) for name, _ in rule.models}
    compared = Comparison(clients=clients, window_s=round(bench.decision_window_s, 1))
    sides = {"rule": rule, "contender": contender}
    runs: dict[str, TorchServeRun] = {}
    load_end = deadline - 2 * STOP_MARGIN_S
    try:
        for side, candidate in sides.items():
            runs[side] = _start(bench, comparison_dir(bench.work_dir, number, side), candidate, clients, load_end)
        targets = {side: _targets(runs[side], sides[side], load_end) for side in sides}
        for side in sides:
            _warm_up(targets[side], bench.photos, clients, load_end - bench.decision_window_s)
        with progress.step(f"compare {contender.describe()} with the rule's plan", "alternating windows"):
            _alternate(bench, compared, targets, settled, load_end)
    except UsageError as err:
        compared.error = str(err)[:2000]
    finally:
        for run in runs.values():
            run.stop()
    compared.seconds = round(time.monotonic() - began, 1)
    return compared


def _start(bench: Bench, folder: Path, candidate: Candidate, clients: dict[str, int], load_end: float) -> TorchServeRun:
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "config.properties"
    write_plan(candidate_plan(bench, candidate, clients), config)
    with progress.step(f"{folder.name}: start TorchServe", candidate.describe()):
        run = start_torchserve(config, folder / "run")
    try:
        run.wait_ready([n for n, _ in candidate.models], timeout=max(1.0, load_end - time.monotonic()))
    except BaseException:
        run.stop()
        raise
    return run


def _alternate(bench: Bench, compared: Comparison, targets, settled, load_end: float) -> None:
    """Rule, contender, contender, rule, rule, contender: each pair in the other order, so a drift falls on both."""
    for pair in range(bench.decision_pairs):
        for side in ("rule", "contender") if pair % 2 == 0 else ("contender", "rule"):
            if time.monotonic() + bench.decision_window_s > load_end:
                compared.stopped = CUT_AT_DEADLINE
                return
            window = _window(targets[side], bench.photos, compared.clients, time.monotonic() + bench.decision_window_s)
            getattr(compared, side).append(_figures(window, compared.clients))
            compared.order.append(side)
            compared.stopped = settled(compared.rule, compared.contender)
            if compared.stopped:
                return


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


def _window(targets, photos, clients, until: float, sampler: TreeSampler | None = None) -> _Window:
    started = time.monotonic()
    records = _load(targets, photos, clients, until)
    ended = time.monotonic()
    cpu = window_stats(sampler.samples, started, ended)["mean_cpu_pct"] if sampler else None
    return _Window(records, started, ended - started, cpu)


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
