"""Measure a stop under load: does the server answer every request it took in, and how long does it take to exit?

`measure_drain` sends requests at a steady rate (open loop: a slow answer does not slow the sending), each on
a connection of its own, calls `stop` (e.g. `tsvk stop`, or SIGTERM to a container's entrypoint) part-way
through, keeps sending until `stop` has returned, and sorts every request by what became of it:
- answered (200, or any status of the model's own: a 4xx);
- refused at connect (the connection was never made: refused, reset or timed out during the handshake): the
  server had stopped accepting; nothing was sent, so nothing was taken in;
- refused with 503 `server_stopping`: it reached a worker after the stop had answered what was taken in,
  and was sent back unread (handlers/tsvk/worker/stopping.py), an answer telling the client to send it again;
- lost: the connection was accepted and closed without an answer, or a 5xx other than that refusal.
A request accepted by the kernel but never read by TorchServe (in the listening socket's queue when it
closes) cannot be told apart from one TorchServe had counted: both are counted lost, so nothing is hidden.
Exit = from the stop's start until the server's processes are gone.

Where the server speaks the Open Inference Protocol, `stop_under_load` also starts GRPC_CALLS_AT_STOP gRPC calls
just before the stop, beside the REST load (grpc_calls.py): what each got says whether gRPC drains as REST does.
"""

from __future__ import annotations

import threading
from collections import Counter
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

import requests

from ... import defaults
from ...engines.base import StopResult
from ...engines.registry import engine_of
from ...engines.shared.drain import DrainReport, is_stop_refusal
from ...engines.torchserve.drain import arrivals
from .grpc_calls import CallsInFlight, summary
from .parts import Service
from .service import ServiceSpec, running_service

SENDERS = 128  # threads sending; enough that none waits for a free one at the rates measured here
REQUEST_TIMEOUT_S = 120.0
# gRPC calls sent at once just before the stop, and how long before it: a loopback connection and one message take
# milliseconds, and sixteen more images on a queue already at DRAIN_LOAD keep most of them in flight past the stop.
GRPC_CALLS_AT_STOP = 16
GRPC_LEAD_S = 0.1


@dataclass
class Outcome:
    sent_at: float
    status: int | None = None  # None: no HTTP answer
    error: str = ""  # why there was no answer
    stop_refusal: bool = False  # a 503 saying the server is stopping (tools/engines/torchserve/drain.py, is_stop_refusal)

    @property
    def refused(self) -> bool:
        """Not taken in: the connection was refused, or a worker refused it unread because the server is stopping."""
        return self.error.startswith("refused: ") or self.stop_refusal

    @property
    def lost(self) -> bool:
        return not self.refused and (self.status is None or self.status >= 500)


def never_connected(err: requests.RequestException) -> bool:
    """The TCP connection was never made, so no byte of the request was sent (urllib3 raises NewConnectionError
    only from connect)."""
    return isinstance(err, requests.ConnectTimeout) or (isinstance(err, requests.ConnectionError) and "NewConnectionError" in str(err))


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
            response = requests.post(url, data=body, headers=headers, timeout=REQUEST_TIMEOUT_S)
            outcome.status, outcome.stop_refusal = response.status_code, is_stop_refusal(response.status_code, response.content)
        except requests.RequestException as err:
            outcome.error = ("refused: " if never_connected(err) else "") + type(err).__name__ + ": " + str(err)[:160]

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
    lost = [o for o in outcomes if o.lost]
    refused_503 = [o for o in outcomes if o.refused and o.status == 503]
    statuses: dict[str, int] = {}
    for outcome in outcomes:
        key = str(outcome.status) if outcome.status is not None else "no answer"
        statuses[key] = statuses.get(key, 0) + 1
    return {
        "rate_per_s": round(rate, 1), "sent": len(outcomes),
        "accepted": sum(1 for o in outcomes if not o.refused), "answered": sum(1 for o in outcomes if not o.refused and not o.lost),
        "lost": len(lost), "lost_before_stop": sum(1 for o in before if o.lost), "sent_before_stop": len(before),
        "answered_after_stop_began": sum(1 for o in after if not o.refused and not o.lost),
        "refused_at_connect": sum(1 for o in outcomes if o.refused and o.status is None),
        "refused_503_server_stopping": len(refused_503),
        "refused_503_sent_before_stop": sum(1 for o in refused_503 if o.sent_at < began),
        "cut": sum(1 for o in lost if o.status is None),
        "statuses": statuses,
        "server_errors": sum(1 for o in outcomes if o.status is not None and o.status >= 500 and not o.refused),
        "exit_s": round(stop_times["gone"] - began, 2), "stop_returned_s": round(stop_times["returned"] - began, 2),
        "lost_examples": sorted({o.error for o in lost})[:3],
    }


def stop_under_load(spec: ServiceSpec, load: float, drain_timeout_s: float = defaults.DRAIN_TIMEOUT_S) -> dict:
    """`make robustness`'s drain part: serve `spec`, measure its capacity, send `load` x capacity and stop it the
    way `tsvk stop` does (its engine's stop: drain, then signal); with the Open Inference Protocol served, gRPC
    calls in flight at the stop too (`grpc_in_flight`)."""
    with running_service(spec) as service:
        run, body = service.run, service.photo
        url, headers = f"{run.url('inference')}/predictions/{service.model}", run.headers("inference")
        rate = load * capacity(url, body, headers)
        counted_before = arrivals(run.url("metrics"))
        stops: list[StopResult] = []
        calls: list[tuple[CallsInFlight, float]] = []

        def stop() -> None:
            calls.extend(_grpc_calls_before_stop(service))
            stops.append(engine_of(run).stop(run, drain_timeout_s))

        report = measure_drain(url, body, rate, stop, headers=headers, gone=lambda: not run.session_alive())
    grpc = {"grpc_in_flight": summary(calls[0][0].wait(REQUEST_TIMEOUT_S), calls[0][1])} if calls else {}
    # The front forwards each gRPC call to TorchServe, which counts it on arrival like the REST clients' requests.
    answered_over_grpc = grpc["grpc_in_flight"].get("answered", 0) if grpc else 0
    return {**report, **counted_by_torchserve(report, counted_before, stops[0].account if stops else None, answered_over_grpc),
            "drain_timeout_s": drain_timeout_s, "load": load, **grpc}


def _grpc_calls_before_stop(service: Service) -> list[tuple[CallsInFlight, float]]:
    """GRPC_CALLS_AT_STOP gRPC calls to the service's model, started GRPC_LEAD_S before the moment returned with
    them (when the stop begins); none where the service does not speak the Open Inference Protocol."""
    if service.front is None:
        return []
    headers = {name.lower(): value for name, value in service.run.headers("inference").items()}
    calls = CallsInFlight(service.front[1], service.model, service.photo, GRPC_CALLS_AT_STOP, headers)
    time.sleep(GRPC_LEAD_S)
    return [(calls, time.monotonic())]


def counted_by_torchserve(report: dict, counted_before: Counter | None, stop: DrainReport | None, answered_elsewhere: int = 0) -> dict:
    """Lost, exactly as docs/robustness.md defines accepted: requests TorchServe counted on arrival and never answered.

    Every answer the clients got is to a request TorchServe counted, so counted - answered is what it counted and
    left unanswered. That holds only where nothing could be counted after the drain's last look: new connections
    refused from the stop's start, and every request here on a connection of its own. Otherwise (or without the
    counts) the clients' own view stands: every connection closed without an answer is lost. `answered_elsewhere`: the
    requests TorchServe counted that other clients sent and got answered (the gRPC calls through the OIP front)."""
    if stop is None or counted_before is None or stop.arrived is None or not (stop.stopped_accepting and stop.drained):
        return {"lost_counted_by": "clients: every connection closed without an answer"}
    counted = stop.arrived - sum(counted_before.values())
    got_answer = report["sent"] - report["statuses"].get("no answer", 0) + answered_elsewhere
    lost = max(0, counted - got_answer) + report["server_errors"]
    return {"lost": lost, "lost_counted_by": "TorchServe's arrival count minus the answers the clients got",
            "counted_by_torchserve": counted, "cut_never_counted": max(0, report["cut"] - (lost - report["server_errors"])),
            "lost_by_the_clients_view": report["lost"]}
