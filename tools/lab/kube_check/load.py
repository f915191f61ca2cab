"""Load for kube-check: closed-loop throughput (tools/measure/loadgen.py), memory sampled while it runs, and an
open loop at a fixed rate that keeps sending while the pod is stopped, recording what became of each request.
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import requests

from ...measure.loadgen import HttpTarget, run_closed_loop, summarize_records
from ...measure.sampler import Periodic
from ...engines.shared.drain import is_stop_refusal

OPEN_LOOP_THREADS = 64
# A worker's RSS moves by tens of MB with each batch's allocate-and-free cycle: one sample says little, so it is
# read this often while the throughput rounds run, and compared as medians with their range.
RSS_SAMPLE_S = 2.0
# Unmeasured load before each round, on either side: every worker has run full batches for a while before a round is
# timed, so a round reads the steady state (a warm-up of 2 requests per client left a fresh pod's first round slow).
WARM_UP_S = 10.0


def throughput(url: str, photo: bytes, seconds: float, concurrency: int) -> dict:
    """Images per second of `concurrency` clients for `seconds`, after WARM_UP_S of the same load."""
    target = HttpTarget(url, make_body=lambda image: image, content_type="image/jpeg")
    run_closed_loop(target, [photo], total=10**9, concurrency=concurrency, until=time.monotonic() + WARM_UP_S)
    records = run_closed_loop(target, [photo], total=10**9, concurrency=concurrency, until=time.monotonic() + seconds)
    summary = summarize_records(records)
    summary.pop("top1", None)
    return summary


def throughput_with_memory(url: str, photo: bytes, seconds: float, concurrency: int,
                           workers_rss_mb: Callable[[], list[float]]) -> tuple[dict, list[float]]:
    """`throughput`, and the summed RSS of the serving workers read every RSS_SAMPLE_S while it runs."""
    with _MemorySampler(workers_rss_mb, RSS_SAMPLE_S) as sampler:
        measured = throughput(url, photo, seconds, concurrency)
    return measured, sampler.samples


@dataclass
class _MemorySampler(Periodic):
    """The summed RSS of the workers `read()` finds, every `interval` seconds (none found: no sample)."""

    read: Callable[[], list[float]]
    interval: float
    samples: list[float] = field(default_factory=list)

    def tick(self) -> None:
        workers = self.read()
        if workers:
            self.samples.append(round(sum(workers), 1))


def memory_summary(samples: list[float]) -> dict:
    """Median and range of RSS samples, in MB."""
    if not samples:
        return {"samples": 0}
    return {"median": round(statistics.median(samples), 1), "min": min(samples), "max": max(samples), "samples": len(samples)}


@dataclass(frozen=True)
class Sent:
    """One request of the open loop: when it was sent and what became of it."""

    started: float
    finished: float
    status: int  # 0: no HTTP answer
    # answered | refused (never connected, or a 503 saying the server is stopping: not taken in)
    # | lost (connected, no answer) | failed (an error status)
    outcome: str
    error: str = ""


def send_fresh(url: str, photo: bytes, timeout_s: float) -> Sent:
    """One request on a connection of its own, so a refused connection and a lost request differ."""
    started = time.monotonic()
    try:
        response = requests.post(url, data=photo, timeout=timeout_s,
                                 headers={"Content-Type": "image/jpeg", "Connection": "close"})
    except requests.ConnectionError as err:
        text = str(err)
        # never connected: refused, no route, or no answer to the connect at all (the pod's address is gone)
        refused = "Connection refused" in text or "No route to host" in text or isinstance(err, requests.ConnectTimeout)
        return Sent(started, time.monotonic(), 0, "refused" if refused else "lost", text[:200])
    except requests.RequestException as err:
        return Sent(started, time.monotonic(), 0, "lost", f"{type(err).__name__}: {err}"[:200])
    outcome = (
        "answered" if response.status_code == 200 else "refused" if is_stop_refusal(response.status_code, response.content) else "failed"
    )
    return Sent(started, time.monotonic(), response.status_code, outcome, "" if outcome == "answered" else response.text[:200])


class OpenLoop:
    """Requests at a fixed rate from a pool of threads until stopped; each request's fate is kept."""

    def __init__(self, url: str, photo: bytes, rate: float, timeout_s: float = 120):
        if rate <= 0:
            raise ValueError(f"rate must be > 0 requests/s, got {rate}")
        self.url, self.photo, self.interval, self.timeout_s = url, photo, 1.0 / rate, timeout_s
        self.records: list[Sent] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._next = time.monotonic()
        self._threads = [threading.Thread(target=self._client, daemon=True) for _ in range(OPEN_LOOP_THREADS)]

    def start(self) -> "OpenLoop":
        for thread in self._threads:
            thread.start()
        return self

    def _ticket(self) -> float | None:
        """The time this thread's next request is due, or None once stopped."""
        with self._lock:
            if self._stop.is_set():
                return None
            due, self._next = self._next, max(self._next + self.interval, time.monotonic() - self.interval)
            return due

    def _client(self) -> None:
        while (due := self._ticket()) is not None:
            time.sleep(max(0.0, due - time.monotonic()))
            if self._stop.is_set():
                return
            record = send_fresh(self.url, self.photo, self.timeout_s)
            with self._lock:
                self.records.append(record)

    def stop(self) -> list[Sent]:
        """Send nothing more; wait for the requests in flight to end."""
        self._stop.set()
        for thread in self._threads:
            thread.join(self.timeout_s + 5)
        return sorted(self.records, key=lambda r: r.started)
