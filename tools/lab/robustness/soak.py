"""`tsvk soak`: an hour and more at a steady share of measured capacity, with a share of malformed
requests and token auth on (so the run spans key renewals), sampling every process's memory and
open files and the good requests' p99 each minute. Writes soak-<timestamp>.{json,md,png} and links soak-latest.* to them."""

from __future__ import annotations

import argparse
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import psutil

from ... import defaults
from ...cpus import detect_vcpus

from ...config.allocator import add_allocator_argument, describe as describe_allocator, resolve as resolve_allocator
from ..bench.result_document import git_state
from ...errors import UsageError
from ...fsutil import point_latest
from ...keys import RENEWER_PID_FILE
from . import checks, watch
from .client import Answer, closed_loop, percentile, send
from .corpus import generate_corpus
from .minute_load import AccessLogTail, cpu_split, read_clock, worker_cpu_ms
from .result_files import RESULTS_DIR, envelope, write
from .robustness_cli import DEFAULT_WORK_DIR
from .service import ServiceSpec, running_service
from .soak_report import summarize, write_plot

MAX_OUTSTANDING = 64  # an open-loop sender that falls this far behind skips sends (and counts them)
MALFORMED_KINDS = ("truncated", "flipped", "random", "empty", "spliced", "bomb")
CLIENT = "soak client"  # this process, in the per-minute CPU split


@dataclass
class Minute:
    """One minute of the soak: what was sent and answered, and the processes at its end."""

    index: int
    good: list[Answer] = field(default_factory=list)
    malformed: list[Answer] = field(default_factory=list)
    skipped: int = 0
    rss_mb: dict[str, float] = field(default_factory=dict)
    fds: dict[str, int] = field(default_factory=dict)
    cpu_pct: dict[str, float] = field(default_factory=dict)  # service / client / outside / steal
    worker_cpu_ms: float = 0.0
    frontend_ms: list[int] = field(default_factory=list)  # the access log's ms of each 200

    def figures(self) -> dict:
        good_ok = [a.seconds for a in self.good if a.status == 200]
        answered = len(self.good) + len(self.malformed)
        return {
            "minute": self.index, "good": len(self.good), "good_errors": sum(1 for a in self.good if a.status != 200),
            "malformed": len(self.malformed), "malformed_5xx": sum(1 for a in self.malformed if a.status >= 500 or a.status == 0),
            "p50_ms": _ms(percentile(good_ok, 50)), "p99_ms": _ms(percentile(good_ok, 99)), "skipped": self.skipped,
            "frontend_p50_ms": percentile(self.frontend_ms, 50), "frontend_p99_ms": percentile(self.frontend_ms, 99),
            "worker_cpu_ms_per_answer": round(self.worker_cpu_ms / answered, 1) if answered else None,
            "cpu_pct": dict(self.cpu_pct),
            "rss_mb": {k: round(v, 1) for k, v in sorted(self.rss_mb.items())}, "fds": dict(sorted(self.fds.items())),
        }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1e3, 1)


def register(commands) -> None:
    p = commands.add_parser("soak", help="a long run at a share of measured capacity: memory, files, p99 and errors per minute")
    p.add_argument("--minutes", type=float, default=defaults.SOAK_MINUTES,
                   help=f"length of the loaded run (default {defaults.SOAK_MINUTES:g}: spans the 60-minute key expiry)")
    p.add_argument("--model", default=defaults.ROBUSTNESS_MODEL)
    p.add_argument("--model-store", type=Path, default=DEFAULT_WORK_DIR / "store")
    p.add_argument(
        "--load", type=float, default=defaults.SOAK_LOAD, help=f"share of the measured capacity to send (default {defaults.SOAK_LOAD})"
    )
    p.add_argument(
        "--malformed", type=float, default=defaults.SOAK_MALFORMED, help=f"share of malformed requests (default {defaults.SOAK_MALFORMED})"
    )
    p.add_argument("--capacity-seconds", type=float, default=60.0, help="closed-loop measurement of capacity first")
    p.add_argument("--warmup-minutes", type=float, default=10.0, help="minutes left out of the drift figures")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    add_allocator_argument(p)
    p.add_argument("--output-dir", type=Path, default=RESULTS_DIR)
    p.add_argument("--work-dir", type=Path, default=DEFAULT_WORK_DIR)
    p.set_defaults(func=cmd_soak)


def cmd_soak(args: argparse.Namespace) -> int:
    if not (0 < args.load <= 1 and 0 <= args.malformed < 1 and args.minutes > 0 and 0 <= args.warmup_minutes < args.minutes):
        raise UsageError("--load must be in (0, 1], --malformed in [0, 1), --minutes > 0 and --warmup-minutes below --minutes")
    from . import archives  # torch: only once a run builds or reads its archive

    started, revision = datetime.now(timezone.utc), git_state()
    store = archives.ensure_archive(args.model_store, args.model)
    spec = ServiceSpec(store, args.model, args.work_dir / "soak", workers=args.workers, allocator=args.allocator)
    print(describe_allocator(args.allocator), flush=True)
    with running_service(spec) as service:
        capacity = _capacity(service, args.capacity_seconds)
        rate = args.load * capacity
        print(f"soak: capacity {capacity:.1f} req/s; sending {rate:.1f} req/s for {args.minutes:g} min", flush=True)
        minutes = _soak(service, rate, args)
    figures = {
        **summarize([m.figures() for m in minutes], capacity, rate, args),
        "allocator": resolve_allocator(args.allocator)[0],
        "handler_differs_from_checkout": archives.served_handler_differences(store, args.model),
    }
    verdict = checks.same_handler(figures["handler_differs_from_checkout"])
    figures["checks"]["served this checkout's handler"], figures["reasons"]["served this checkout's handler"] = verdict.ok, verdict.reason
    result = envelope("soak", detect_vcpus(), {"soak": figures}, started, revision)
    plot = write_plot(figures["per_minute"], args.output_dir / f"soak-{started.strftime('%Y%m%dT%H%M%SZ')}.png")
    written = write(result, "soak", args.output_dir, extra_md=f"\n![soak]({plot.name})\n" if plot else "")
    if plot:
        point_latest(args.output_dir / "soak-latest.png", plot)
    for name, ok in result["checks"].items():
        print(f"  {'ok  ' if ok else 'FAIL'} {name}")
    print(f"wrote {written['json']} and {written['md']}")
    return 0 if result["passed"] else 1


def _capacity(service, seconds: float) -> float:
    """Good requests per second a closed loop of 2 x batch clients gets answered with 200."""
    ends = time.monotonic() + seconds
    answers = closed_loop(service.target, service.photo, 16, lambda: time.monotonic() > ends)
    return sum(1 for _, a in answers if a.status == 200) / seconds


def _soak(service, rate: float, args: argparse.Namespace) -> list[Minute]:
    rng = random.Random(args.seed)
    malformed = [i for i in generate_corpus(2000, args.seed) if i.kind in MALFORMED_KINDS]
    minutes: list[Minute] = []
    recorder = MinuteRecorder(service, args.model)
    outstanding = threading.Semaphore(MAX_OUTSTANDING)
    began = time.monotonic()
    ends = began + args.minutes * 60
    with ThreadPoolExecutor(max_workers=MAX_OUTSTANDING) as pool:
        next_send = began
        while time.monotonic() < ends:
            index = int((time.monotonic() - began) // 60)
            while len(minutes) <= index:
                if minutes:
                    recorder.close(minutes[-1])
                minutes.append(Minute(len(minutes)))
            bad = malformed[rng.randrange(len(malformed))] if rng.random() < args.malformed else None
            if outstanding.acquire(blocking=False):
                pool.submit(_one, service, bad, minutes[index], outstanding)
            else:
                minutes[index].skipped += 1
            next_send += rng.expovariate(rate)  # Poisson arrivals at `rate`
            time.sleep(max(0.0, next_send - time.monotonic()))
    recorder.close(minutes[-1])
    return minutes


def _one(service, bad, minute: Minute, outstanding: threading.Semaphore) -> None:
    try:
        if bad is None:
            minute.good.append(send(service.target, service.photo))
        else:
            minute.malformed.append(send(service.target, bad.payload, bad.content_type))
    finally:
        outstanding.release()


class MinuteRecorder:
    """Closes each minute: every process's memory and open files at its end, where the machine's CPU
    went during it, and the frontend's own latency for it from the access log; logs a line."""

    def __init__(self, service, model: str):
        self.service = service
        self.access_log = AccessLogTail(service.run.run_dir, model)
        self.clock = self._read_clock()

    def _read_clock(self):
        processes = {**watch.named(self.service.run, _renewer(self.service.run.run_dir)), CLIENT: psutil.Process()}
        return read_clock(processes, time.monotonic())

    def close(self, minute: Minute) -> None:
        sampled = watch.sample(self.service.run, _renewer(self.service.run.run_dir))
        clock = self._read_clock()
        minute.rss_mb, minute.fds = sampled.rss_mb, sampled.fds
        minute.cpu_pct, minute.worker_cpu_ms = cpu_split(self.clock, clock, CLIENT), worker_cpu_ms(self.clock, clock)
        minute.frontend_ms = [ms for status, ms in self.access_log.new_answers() if status == 200]
        self.clock = clock
        figures = minute.figures()
        print(
            f"soak: minute {figures['minute'] + 1}: {figures['good']} good ({figures['good_errors']} errors), "
            f"p99 {figures['p99_ms']} ms (frontend {figures['frontend_p99_ms']}), "
            f"worker {figures['worker_cpu_ms_per_answer']} CPU ms/answer, CPU % {figures['cpu_pct']}, "
            f"RSS {sum(sampled.rss_mb.values()):.0f} MiB, fds {sum(sampled.fds.values())}",
            flush=True,
        )


def _renewer(run_dir: Path) -> list[psutil.Process]:
    try:
        return [psutil.Process(int((run_dir / RENEWER_PID_FILE).read_text().split()[0]))]
    except (OSError, ValueError, psutil.Error):
        return []
