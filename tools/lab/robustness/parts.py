"""The parts of `tsvk robustness`, each against a running TorchServe, each returning its figures.

Every part returns a dict of measurements plus `checks`: {name: true/false} for what it must show,
so the report states both the numbers and whether each promise held.
"""

from __future__ import annotations

import base64
import collections
import json
import threading
import time
from dataclasses import dataclass, field

from tsvk.common import task_kind

from ..bench.tsmetrics import metric_total, scrape
from ...engines.torchserve.server import TorchServeRun
from . import checks, watch
from .checks import judged
from .client import CLIENT_ERROR, Answer, Target, closed_loop, histogram, percentile, send, send_all, send_together
from .attacks import BOMB_SIDE
from .corpus import BOMB_FORMATS, declare_size, generate_corpus, seed_images
from .hey import burst as hey_burst

# 503 counts only as the documented refusals (a deadline, a full queue: `Answer.label`); any other 503 is its own label.
FUZZ_ALLOWED_STATUSES = (200, 400, 413, 415, 503)
DOCUMENTED_5XX = (503,)
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
    tasks: dict = field(default_factory=dict)  # every served model -> its task ("classify", "detect", "segment")
    front: tuple[str, str] | None = None  # the OIP front's REST base URL and gRPC target, when it runs
    batches: dict = field(default_factory=dict)  # model -> its TorchServe batch size
    deadline_ms: int | None = None  # requests queued longer are answered 503 deadline_exceeded

    @property
    def client_timeout_s(self) -> float:
        """How long a client waits for an answer: the longest a request may queue (its deadline), then its batch
        (the response timeout), and a margin; without a deadline, as long as a batch may take and the margin."""
        return (self.deadline_ms or 0) / 1e3 + self.response_timeout_s + 30.0

    @property
    def target(self) -> Target:
        return self.target_for(self.model)

    def target_for(self, model: str) -> Target:
        return Target(f"{self.run.url('inference')}/predictions/{model}", self.run.run_dir, self.client_timeout_s)

    def front_target(self, model: str) -> Target | None:
        """The front's REST infer URL for `model`; None when no front runs."""
        if self.front is None:
            return None
        return Target(f"{self.front[0]}/v2/models/{model}/infer", self.run.run_dir, self.client_timeout_s)

    def worker_pids(self) -> set[int] | None:
        """The model's worker pids; None when the management API did not answer."""
        return watch.worker_pids(self.run, self.model)


def fuzz(service: Service, count: int, seed: int, concurrency: int) -> dict:
    """`count` Hypothesis-generated hostile requests at `concurrency`, spread over every served model and
    the OIP front (fuzz_routes); statuses per route and kind, 5xx, deaths, time, memory."""
    corpus = generate_corpus(count, seed)
    routes = [fuzz_route(i, service.tasks or {service.model: "classify"}, service.front is not None) for i in range(len(corpus))]
    pids_before = _all_worker_pids(service)
    rss_before = _worker_rss(service)
    started = time.monotonic()
    with watch.PeakWorkerRss(service.run) as memory:
        answers = send_all([_fuzz_job(service, item, route) for item, route in zip(corpus, routes)], concurrency)
    elapsed = time.monotonic() - started
    pids_after = _all_worker_pids(service)
    by_kind = collections.defaultdict(collections.Counter)
    by_route = collections.defaultdict(collections.Counter)
    for item, route, answer in zip(corpus, routes, answers):
        by_kind[item.kind][answer.label] += 1
        by_route[" ".join(route)][answer.label] += 1
    statuses = histogram(answers)
    documented = {str(status) for status in DOCUMENTED_5XX}
    server_errors = sum(n for s, n in statuses.items() if s.startswith("5") and s not in documented)
    sent, answered_count = len(answers), sum(1 for a in answers if a.status != CLIENT_ERROR)
    return {
        "inputs": sent,
        "answered": answered_count,
        "seed": seed,
        "concurrency": concurrency,
        "seconds": round(elapsed, 1),
        "statuses": statuses,
        "by_kind": {k: dict(sorted(v.items())) for k, v in sorted(by_kind.items())},
        "by_route": {k: dict(sorted(v.items())) for k, v in sorted(by_route.items())},
        "server_errors": server_errors,
        "documented_503": statuses.get("503", 0),
        "client_errors": statuses.get("0", 0),
        "worker_deaths": _deaths(pids_before, pids_after),
        "slowest_s": round(max((a.seconds for a in answers), default=0.0), 3),
        "workers_rss_mb_before": round(rss_before, 1),
        "peak_worker_rss_mb": round(memory.peak_mb, 1),
        **judged(
            {
                "every input answered": checks.all_answered(answered_count, sent),
                "only 200/400/413/415 and the documented 503": checks.statuses_allowed(statuses, FUZZ_ALLOWED_STATUSES),
                "no 5xx but the documented 503": checks.no_server_errors(statuses, DOCUMENTED_5XX),
                "no worker died": checks.no_worker_died(pids_before, pids_after),
            }
        ),
    }


# Of every FUZZ_ROUTE_CYCLE inputs: how many go to a detector, a segmenter, and through the OIP front
# (an R-CNN answer costs seconds of CPU, so the detector gets the smallest share); the rest to /predictions
# of the classifier.
FUZZ_ROUTE_CYCLE = 40
FUZZ_ROUTE_SHARES = (("detect", "predictions", 1), ("segment", "predictions", 4), ("classify", "front", 4))


def fuzz_route(index: int, tasks: dict[str, str], front: bool) -> tuple[str, str]:
    """(model, transport) for the index-th fuzz input: deterministic, every served model and the
    front in their shares; a share whose model or front is not served goes to the classifier."""
    slot, classifier = index % FUZZ_ROUTE_CYCLE, next((m for m, t in tasks.items() if task_kind(t).top_k), next(iter(tasks)))
    for task, transport, share in FUZZ_ROUTE_SHARES:
        if slot < share:
            model = next((m for m, t in tasks.items() if t == task), None)
            if model is not None and (transport != "front" or front):
                return model, transport
            break
        slot -= share
    return classifier, "predictions"


def _all_worker_pids(service: Service) -> set[int] | None:
    pids = [watch.worker_pids(service.run, m) for m in (service.tasks or {service.model: ""})]
    return None if any(p is None for p in pids) else set().union(*pids)


def _fuzz_job(service: Service, item, route: tuple[str, str]):
    model, transport = route
    if transport == "front":  # the input as an OIP document's one BYTES element
        document = {"inputs": [{"name": "images", "datatype": "BYTES", "shape": [1], "data": [base64.b64encode(item.payload).decode()]}]}
        return lambda: send(service.front_target(model), json.dumps(document).encode(), "application/json")
    return lambda: send(service.target_for(model), item.payload, item.content_type)


def _deaths(before: set[int] | None, after: set[int] | None) -> int | None:
    return None if before is None or after is None else len(before - after)


def bombs(service: Service) -> dict:
    """Each allowed format's bomb alone (handler time from the handler's own gauge), then nine PNG
    bombs at once (the bombed model's workers' memory before and after)."""
    per_format = {}
    for fmt in BOMB_FORMATS:
        answer = send(service.target, declare_size(seed_images()[fmt], fmt, BOMB_SIDE, BOMB_SIDE))
        time.sleep(METRICS_LAG_S)
        per_format[fmt] = {"status": answer.status, "error": answer.error, "handler_ms": _preprocess_ms(service)}
    before = watch.model_worker_rss(service.run, service.model)  # the bombed model's workers: the others may be warming up
    burst = send_together(service.target, [declare_size(seed_images()["png"], "png", BOMB_SIDE + i, BOMB_SIDE) for i in range(9)])
    after = watch.model_worker_rss(service.run, service.model)
    common = before.keys() & after.keys()
    handler_ms = [v["handler_ms"] for v in per_format.values()]
    return {
        "per_format": per_format,
        "burst_of_nine_png": histogram(burst),
        "worker_rss_growth_mb": round(max(after[w] - before[w] for w in common), 1) if common else None,
        **judged(
            {
                "every bomb 413 image_too_large": checks.refused_with(
                    [(v["status"], v["error"]) for v in per_format.values()], 413, "image_too_large"
                ),
                "handler under 20 ms per bomb": checks.below(
                    None if None in handler_ms else max(handler_ms, default=None), checks.BOMB_HANDLER_MS, "handler ms on the slowest bomb"
                ),
                "worker grew under 5 MB": checks.grew_under(before, after, checks.BOMB_GROWTH_MB),
            }
        ),
    }


def _preprocess_ms(service: Service) -> float | None:
    """The handler's preprocessing gauge for the model; None when /metrics did not report it."""
    try:
        return metric_total(scrape(service.run), "TsvkPreprocessMs", service.model)
    except (OSError, ValueError):
        return None


def _worker_rss(service: Service) -> float:
    return sum(watch.worker_rss(service.run).values())


def overload(service: Service, factor: int) -> dict:
    """A burst of `factor` x job_queue_size requests (sent by hey): the excess must get fast 503s,
    every other request an answer; no worker restarts; normal service right after."""
    pids_before = service.worker_pids()
    requested = factor * service.job_queue_size
    burst = hey_burst(service.target, service.photo, requested)
    refused = [a for a in burst if a.status == 503]
    accepted = [a for a in burst if a.status != 503]
    after = [send(service.target, service.photo) for _ in range(5)]
    pids_after = service.worker_pids()
    return {
        "requests": requested,
        "answered": len(burst),
        "job_queue_size": service.job_queue_size,
        "statuses": histogram(burst),
        "refused_503": len(refused),
        "refused_p50_ms": _ms(percentile([a.seconds for a in refused], 50)),
        "refused_p99_ms": _ms(percentile([a.seconds for a in refused], 99)),
        "accepted_p99_ms": _ms(percentile([a.seconds for a in accepted], 99)),
        "worker_restarts": _deaths(pids_before, pids_after),
        "after": histogram(after),
        **judged(
            {
                "excess refused with 503": checks.any_refused(len(refused)),
                "503s answered within 1 s (p99)": checks.percentile_below(
                    [a.seconds for a in refused], 99, checks.OVERLOAD_503_S, "p99 seconds of the 503s"
                ),
                "every request answered": checks.all_answered(len(burst), requested),
                "every accepted request answered 200": checks.all_status([a.status for a in accepted], 200, "accepted requests"),
                "no worker restarts": checks.no_worker_died(pids_before, pids_after),
                "normal answers right after": checks.all_status([a.status for a in after], 200, "requests after the burst"),
            }
        ),
    }


def worker_kill(service: Service, concurrency: int, load_s: float) -> dict:
    """SIGKILL one worker mid-load; what failed and how, how long until READY again, what came after."""
    pids = service.worker_pids()
    if not pids:
        raise RuntimeError("the management API listed no worker to kill")
    victim = min(pids)
    load_ends = time.monotonic() + load_s
    recovery = _Recovery(service, victim)

    def until() -> bool:
        recovery.kill_once_after(2.0)
        return time.monotonic() > load_ends

    loaded = [a for _, a in closed_loop(service.target, service.photo, concurrency, until)]
    recovered_s = recovery.wait(timeout=180)
    after = [send(service.target, service.photo) for _ in range(20)]
    failed = [a for a in loaded if a.status != 200]
    starts = watch.logged_worker_starts(service.run, service.model)
    return {
        "killed_pid": victim,
        "worker_starts_logged": starts,
        "requests_under_load": len(loaded),
        "failed": len(failed),
        "failed_statuses": histogram(failed),
        "failed_bodies": dict(collections.Counter(f"{a.source}:{a.error}" for a in failed)),
        "slowest_s": round(max((a.seconds for a in loaded), default=0.0), 2),
        "response_timeout_s": service.response_timeout_s,
        "recovery_s": None if recovered_s is None else round(recovered_s, 1),
        "after": histogram(after),
        **judged(
            {
                "none hung past the response timeout": checks.slowest_below(
                    [a.seconds for a in loaded], service.response_timeout_s, "slowest answer under load (s)"
                ),
                "worker READY again": checks.happened(recovered_s, "every worker READY again"),
                "all 200 after recovery": checks.all_status([a.status for a in after], 200, "requests after recovery"),
                "the restart is in the workers' log": checks.at_least(starts, service.workers + 1, "worker starts logged"),
            }
        ),
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
