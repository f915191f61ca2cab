"""Measure a stop under load: does the server answer every request it took in, and how long does it take to exit?

`measure_drain` sends requests at a steady rate (open loop: a slow answer does not slow the sending), calls
`stop` (e.g. `tsvk stop`, or SIGTERM to a container's entrypoint) part-way through, keeps sending until
`stop` has returned, and sorts every request:
- sent before the stop began: the server had taken it in (or was taking it in); it must be answered;
- sent after: answered, refused (connection refused: not taken in), or cut (the connection closed
  without an answer: taken in during the drain and dropped when the drain timeout passed).
Lost = requests sent before the stop began that got no answer. Exit = from the stop's start to its return
(the caller's `stop` returns once the server's processes are gone).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

import requests

from .. import defaults
from .service import ServiceSpec, running_service

SENDERS = 128  # threads sending; enough that none waits for a free one at the rates measured here
REQUEST_TIMEOUT_S = 120.0


@dataclass
class Outcome:
    sent_at: float
    status: int | None = None  # None: no HTTP answer
    error: str = ""


def capacity(url: str, body: bytes, headers: dict[str, str], concurrency: int = 8, seconds: float = 5.0) -> float:
    """Answers per second with `concurrency` clients sending back to back (each its own keep-alive connection)."""
    deadline, counts = time.monotonic() + seconds, []

    def client() -> None:
        session, answered = requests.Session(), 0
        while time.monotonic() < deadline:
            answered += session.post(url, data=body, headers=headers, timeout=REQUEST_TIMEOUT_S).status_code == 200
        counts.append(answered)

    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(counts) / (time.monotonic() - started)


def measure_drain(url: str, body: bytes, rate: float, stop: Callable[[], object], headers: dict[str, str] | None = None,
                  warmup_s: float = 5.0, after_s: float = 1.0, gone: Callable[[], bool] | None = None) -> dict:
    """Send `rate` requests/s to `url`; call `stop()` after `warmup_s`; report what was accepted, answered, lost.
    `gone()` says when the server's processes have all exited (exit_s); without it, when `stop()` returns."""
    outcomes: list[Outcome] = []
    stop_times: dict[str, float] = {}
    # A connection per request: a refused connect then means "not taken in", and no request is ever written
    # to a kept-alive connection the server had already closed (which would look like a dropped request).
    headers = {**(headers or {}), "Connection": "close"}

    def send(outcome: Outcome) -> None:
        try:
            outcome.status = requests.post(url, data=body, headers=headers, timeout=REQUEST_TIMEOUT_S).status_code
        except requests.RequestException as err:
            refused = isinstance(err, requests.ConnectionError) and "NewConnectionError" in str(err) and "refused" in str(err)
            outcome.error = ("refused: " if refused else "") + type(err).__name__ + ": " + str(err)[:160]

    def stopper() -> None:
        stop_times["began"] = time.monotonic()
        try:
            stop()
        finally:  # a stop that fails still ends the sending; the caller sees its exception in the thread's log
            stop_times["returned"] = time.monotonic()

    def watch_exit() -> None:
        while "began" not in stop_times:
            time.sleep(0.02)
        while not gone():
            time.sleep(0.05)
        stop_times["gone"] = time.monotonic()

    start, stop_thread = time.monotonic(), threading.Thread(target=stopper)
    watcher = threading.Thread(target=watch_exit, daemon=True)
    if gone is not None:
        watcher.start()
    with ThreadPoolExecutor(SENDERS) as pool:
        for i in range(10**9):
            due = start + i / rate
            if due - start >= warmup_s and stop_thread.ident is None:
                stop_thread.start()
            if "returned" in stop_times and time.monotonic() > stop_times["returned"] + after_s:
                break
            time.sleep(max(0.0, due - time.monotonic()))
            outcome = Outcome(time.monotonic())
            outcomes.append(outcome)
            pool.submit(send, outcome)
    stop_thread.join()
    if gone is not None:
        watcher.join(timeout=60)
    stop_times.setdefault("gone", stop_times["returned"])
    return drain_report(outcomes, stop_times, rate)


def drain_report(outcomes: list[Outcome], stop_times: dict[str, float], rate: float) -> dict:
    began = stop_times["began"]
    before = [o for o in outcomes if o.sent_at < began]
    after = [o for o in outcomes if o.sent_at >= began]
    answered_after = [o for o in after if o.status is not None]
    refused = [o for o in after if o.status is None and o.error.startswith("refused: ")]
    lost = [o for o in before if o.status is None]
    statuses: dict[str, int] = {}
    for outcome in outcomes:
        key = str(outcome.status) if outcome.status is not None else "no answer"
        statuses[key] = statuses.get(key, 0) + 1
    return {
        "rate_per_s": round(rate, 1), "sent": len(outcomes),
        "accepted": len(before) + len(answered_after), "answered": len(before) - len(lost) + len(answered_after),
        "lost": len(lost), "sent_before_stop": len(before), "answered_after_stop_began": len(answered_after),
        "refused_after_stop_began": len(refused), "cut_after_stop_began": len(after) - len(answered_after) - len(refused),
        "statuses": statuses,
        "server_errors": sum(1 for o in outcomes if o.status is not None and o.status >= 500),
        "exit_s": round(stop_times["gone"] - began, 2), "stop_returned_s": round(stop_times["returned"] - began, 2), "lost_examples": sorted({o.error for o in lost})[:3],
        "unanswered_after_examples": sorted({o.error for o in after if o.status is None})[:3],
    }


def stop_under_load(spec: ServiceSpec, load: float, drain_timeout_s: float = defaults.DRAIN_TIMEOUT_S) -> dict:
    """`make robustness`'s drain part: serve `spec`, measure its capacity, send `load` x capacity and stop it the
    way `tsvk stop` does (`TorchServeRun.stop`: drain, then signal). Lost counts every request the server took in
    and never answered: those sent before the stop and those cut after it began alike."""
    with running_service(spec) as service:
        run, body = service.run, service.photo
        url, headers = f"{run.url('inference')}/predictions/{service.model}", run.headers("inference")
        rate = load * capacity(url, body, headers)
        report = measure_drain(url, body, rate, lambda: run.stop(drain_timeout=drain_timeout_s), headers=headers,
                               gone=lambda: not run.session_alive())
    return {**report, "lost": report["lost"] + report["cut_after_stop_began"], "lost_before_stop": report["lost"],
            "drain_timeout_s": drain_timeout_s, "load": load}
