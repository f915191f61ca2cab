"""The parts of `tsvk robustness`, each against a running TorchServe, each returning its figures.

Every part returns a dict of measurements plus `checks`: {name: true/false} for what it must show,
so the report states both the numbers and whether each promise held.
"""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass

from ..server import TorchServeRun
from . import watch
from .client import Answer, Target, closed_loop, histogram, percentile, send, send_all, send_together
from .corpus import BOMB_FORMATS, declare_size, generate_corpus, seed_images

FUZZ_ALLOWED_STATUSES = (200, 400, 413, 415)
METRICS_LAG_S = 0.5  # the handler's metrics reach /metrics through the frontend's log parsing


@dataclass(frozen=True)
class Service:
    """The TorchServe under test and what its config says."""

    run: TorchServeRun
    model: str
    workers: int
    job_queue_size: int
    response_timeout_s: int
    photo: bytes  # a real photograph: what a good request sends

    @property
    def target(self) -> Target:
        return Target(f"{self.run.url('inference')}/predictions/{self.model}", self.run.run_dir, self.response_timeout_s + 30.0)

    def worker_pids(self) -> set[int]:
        return {w["pid"] for w in watch.workers(self.run, self.model) if w.get("pid")}


def fuzz(service: Service, count: int, seed: int, concurrency: int) -> dict:
    """`count` Hypothesis-generated hostile requests at `concurrency`; statuses, 5xx, deaths, time, memory."""
    corpus = generate_corpus(count, seed)
    pids_before = service.worker_pids()
    rss_before = _worker_rss(service)
    started = time.monotonic()
    with watch.PeakWorkerRss(service.run) as memory:
        answers = send_all([_fuzz_job(service.target, item) for item in corpus], concurrency)
    elapsed = time.monotonic() - started
    deaths = len(pids_before - service.worker_pids())
    by_kind = collections.defaultdict(collections.Counter)
    for item, answer in zip(corpus, answers):
        by_kind[item.kind][str(answer.status)] += 1
    statuses = histogram(answers)
    server_errors = sum(n for s, n in statuses.items() if s.startswith("5"))
    return {
        "inputs": len(corpus), "seed": seed, "concurrency": concurrency, "seconds": round(elapsed, 1),
        "statuses": statuses, "by_kind": {k: dict(sorted(v.items())) for k, v in sorted(by_kind.items())},
        "server_errors": server_errors, "client_errors": statuses.get("0", 0), "worker_deaths": deaths,
        "slowest_s": round(max(a.seconds for a in answers), 3), "workers_rss_mb_before": round(rss_before, 1),
        "peak_worker_rss_mb": round(memory.peak_mb, 1),
        "checks": {
            "at least 10,000 inputs": len(corpus) >= 10_000,
            "only 200/400/413/415": set(map(int, statuses)) <= set(FUZZ_ALLOWED_STATUSES),
            "no 5xx": server_errors == 0, "no worker died": deaths == 0,
        },
    }


def _fuzz_job(target: Target, item):
    return lambda: send(target, item.payload, item.content_type)


def bombs(service: Service) -> dict:
    """Each allowed format's bomb alone (handler time from the handler's own gauge), then nine PNG
    bombs at once (the workers' memory before and after)."""
    from ..bench.tsmetrics import metric_total, scrape

    per_format = {}
    for fmt in BOMB_FORMATS:
        answer = send(service.target, declare_size(seed_images()[fmt], fmt, 12_000, 10_000))
        time.sleep(METRICS_LAG_S)
        handler_ms = metric_total(scrape(service.run), "TsvkPreprocessMs", service.model)
        per_format[fmt] = {"status": answer.status, "error": answer.error, "handler_ms": handler_ms}
    before = _worker_rss(service)
    burst = send_together(service.target, [declare_size(seed_images()["png"], "png", 12_000 + i, 10_000) for i in range(9)])
    growth = _worker_rss(service) - before
    worst_ms = max((v["handler_ms"] or 0.0) for v in per_format.values())
    return {
        "per_format": per_format, "burst_of_nine_png": histogram(burst), "worker_rss_growth_mb": round(growth, 1),
        "checks": {
            "every bomb 413 image_too_large": all(v["status"] == 413 and v["error"] == "image_too_large" for v in per_format.values()),
            "handler under 20 ms per bomb": worst_ms < 20.0, "worker grew under 5 MB": growth < 5.0,
        },
    }


def _worker_rss(service: Service) -> float:
    return sum(mb for name, mb in watch.sample(service.run).rss_mb.items() if name.startswith("worker"))


def overload(service: Service, factor: int) -> dict:
    """A burst of `factor` x job_queue_size requests (sent by hey): the excess must get fast 503s,
    every other request an answer; no worker restarts; normal service right after."""
    from .hey import burst as hey_burst

    pids_before = service.worker_pids()
    burst = hey_burst(service.target, service.photo, factor * service.job_queue_size)
    refused = [a for a in burst if a.status == 503]
    accepted = [a for a in burst if a.status != 503]
    after = [send(service.target, service.photo) for _ in range(5)]
    restarts = len(pids_before - service.worker_pids())
    return {
        "requests": factor * service.job_queue_size, "answered": len(burst), "job_queue_size": service.job_queue_size, "statuses": histogram(burst),
        "refused_503": len(refused), "refused_p50_ms": _ms(percentile([a.seconds for a in refused], 50)),
        "refused_p99_ms": _ms(percentile([a.seconds for a in refused], 99)),
        "accepted_p99_ms": _ms(percentile([a.seconds for a in accepted], 99)),
        "worker_restarts": restarts,
        "after": histogram(after),
        "checks": {
            "excess refused with 503": len(refused) > 0,
            "503s answered within 1 s (p99)": bool(refused) and percentile([a.seconds for a in refused], 99) < 1.0,
            "every request answered": len(burst) == factor * service.job_queue_size,
            "every accepted request answered 200": all(a.status == 200 for a in accepted),
            "no worker restarts": restarts == 0, "normal answers right after": all(a.status == 200 for a in after),
        },
    }


def worker_kill(service: Service, concurrency: int, load_s: float) -> dict:
    """SIGKILL one worker mid-load; what failed and how, how long until READY again, what came after."""
    victim = min(service.worker_pids())
    load_ends = time.monotonic() + load_s
    recovery = _Recovery(service, victim)

    def until() -> bool:
        recovery.kill_once_after(2.0)
        return time.monotonic() > load_ends

    loaded = [a for _, a in closed_loop(service.target, service.photo, concurrency, until)]
    recovered_s = recovery.wait(timeout=180)
    after = [send(service.target, service.photo) for _ in range(20)]
    failed = [a for a in loaded if a.status != 200]
    slowest = max(a.seconds for a in loaded)
    starts = watch.logged_worker_starts(service.run, service.model)
    return {
        "killed_pid": victim, "worker_starts_logged": starts, "requests_under_load": len(loaded), "failed": len(failed), "failed_statuses": histogram(failed),
        "failed_bodies": dict(collections.Counter(f"{a.source}:{a.error}" for a in failed)),
        "slowest_s": round(slowest, 2), "response_timeout_s": service.response_timeout_s,
        "recovery_s": None if recovered_s is None else round(recovered_s, 1), "after": histogram(after),
        "checks": {
            "none hung past the response timeout": slowest < service.response_timeout_s,
            "worker READY again": recovered_s is not None, "all 200 after recovery": all(a.status == 200 for a in after),
            "the restart is in the workers' log": starts > service.workers,
        },
    }


class _Recovery:
    """Kills the victim once, then measures the seconds from the kill until every worker is READY
    again under pids that are not the victim's (polled in the background while load goes on)."""

    def __init__(self, service: Service, victim: int):
        self.service, self.victim = service, victim
        self.began = time.monotonic()
        self.killed_at: float | None = None
        self.ready_at: float | None = None
        self._thread: threading.Thread | None = None

    def kill_once_after(self, delay_s: float) -> None:
        with _KILL_LOCK:
            if self.killed_at is None and time.monotonic() - self.began > delay_s:
                watch.kill_worker(self.service.run, self.victim)
                self.killed_at = time.monotonic()
                self._thread = threading.Thread(target=self._poll, daemon=True)
                self._thread.start()

    def _poll(self) -> None:
        waited = watch.wait_all_ready(self.service.run, self.service.model, self.service.workers, 180, avoid={self.victim})
        if waited is not None:
            self.ready_at = time.monotonic()

    def wait(self, timeout: float) -> float | None:
        if self._thread is not None:
            self._thread.join(timeout)
        return None if self.ready_at is None or self.killed_at is None else self.ready_at - self.killed_at


_KILL_LOCK = threading.Lock()


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1e3, 1)


def answered(answers: list[Answer], status: int) -> int:
    return sum(1 for a in answers if a.status == status)
