"""A stop that answers what the server had taken in before it is signalled, whatever the engine, told apart from how an
engine counts its requests (`Counts`: TorchServe's metrics and access log, tools/engines/torchserve/drain.py).

In order, within the drain timeout: wait until every request counted when the stop began has been answered; make the
server refuse the rest (`refuse_new`: its workers answer 503 `server_stopping` from then on); wait until nothing is in
flight and no connection holds a request not yet read (`unread`); let SETTLE_S pass, and check again. The caller has
stopped the server accepting first (listeners.py) and signals it after.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Protocol

from tsvk.common import ServerStopping

from ... import defaults
from .listeners import NOT_CLOSED, ListenersClosed

POLL_S = 0.02
# TorchServe writes an answer's access-log line as it hands the answer to Netty, which sends it when its event loop
# next runs; signalled at once, the frontend may close the connection first (seen under a load average of 12 on 2
# vCPUs: 1 counted request in 28 cut). Once idle, the drain lets this long pass, then checks again.
SETTLE_S = 0.5


@dataclass
class DrainReport:
    drained: bool  # every counted request was answered before TorchServe was signalled
    waited_s: float
    in_flight_at_stop: int | None  # None: TorchServe's counts could not be read
    accepted: int | None = None  # requests TorchServe had counted when the stop began (all models)
    earlier_answered_s: float | None = None  # when those had all been answered (None: not within the timeout)
    stopped_accepting: bool = False  # new connections were refused from the stop's start (step 1)
    queue_accepted: bool = True  # step 1 let TorchServe accept what waited in the listener's queue (else: shut at once)
    arrived: int | None = None  # requests TorchServe had counted (all models, since it started) when it was signalled


class Counts(Protocol):
    """A server's requests per model: counted on arrival, and answered."""

    def arrived(self) -> Counter | None: ...  # None: TorchServe's metrics API does not answer

    def answered(self) -> Counter: ...


def drain(counts: Counts, refuse_new: Callable[[], None], timeout_s: float, closed: ListenersClosed = NOT_CLOSED,
          unread: Callable[[], int] = lambda: 0) -> DrainReport:
    """Steps 2-4 of the module docstring: the requests counted now are answered, then the workers refuse
    the rest, then wait until nothing is in flight; all within `timeout_s`. `closed`: what step 1 achieved;
    `unread()`: connections holding a request the frontend has not read yet (listeners.unread_connections)."""
    started = time.monotonic()
    deadline = started + timeout_s
    accepted = counts.arrived()
    if accepted is None:  # the metrics API is not answering: nothing to wait for that could be known
        refuse_new()
        return DrainReport(False, 0.0, None, stopped_accepting=closed.refusing, queue_accepted=closed.queue_accepted)
    earlier = _wait_for(lambda: _covers(counts.answered(), accepted), deadline)
    refuse_new()
    report = wait_until_idle(counts, max(0.0, deadline - time.monotonic()), unread)
    if report.drained:  # the last answers are logged as they are written: give the frontend time to send them
        time.sleep(min(SETTLE_S, max(0.0, deadline - time.monotonic())))
        report = wait_until_idle(counts, max(0.0, deadline - time.monotonic()), unread)
    report.waited_s = time.monotonic() - started
    report.accepted = sum(accepted.values())
    report.earlier_answered_s = earlier - started if earlier is not None else None
    report.stopped_accepting, report.queue_accepted = closed.refusing, closed.queue_accepted
    return report


def wait_until_idle(counts: Counts, timeout_s: float, unread: Callable[[], int] = lambda: 0) -> DrainReport:
    """Until every request TorchServe counted has been answered (the answers are read first, then the
    arrivals, so a match means nothing was in flight when the answers were read) and no connection holds a
    request not yet read, or `timeout_s`."""
    started = time.monotonic()
    while True:
        answered = counts.answered()
        arrived = counts.arrived()
        if arrived is None:
            return DrainReport(False, time.monotonic() - started, None)
        in_flight = sum(max(0, count - answered[model]) for model, count in arrived.items()) + unread()
        if in_flight == 0 or time.monotonic() - started >= timeout_s:
            return DrainReport(in_flight == 0, time.monotonic() - started, in_flight, arrived=sum(arrived.values()))
        time.sleep(POLL_S)


def _covers(answered: Counter, accepted: Counter) -> bool:
    return all(answered[model] >= count for model, count in accepted.items())


def _wait_for(condition: Callable[[], bool], deadline: float) -> float | None:
    """The monotonic time `condition` first held, or None if it did not before `deadline`."""
    while True:
        if condition():
            return time.monotonic()
        if time.monotonic() >= deadline:
            return None
        time.sleep(POLL_S)


def is_stop_refusal(status: int | None, body: str | bytes) -> bool:
    """An answer saying the server is stopping and took the request in no further (step 3): not a lost request."""
    if status != ServerStopping.status:
        return False
    try:
        document = json.loads(body)
    except ValueError:
        return False
    return isinstance(document, dict) and document.get("error") == ServerStopping.code


def describe_drain(report: DrainReport | None) -> str:
    if report is None:
        return "nothing was running to drain"
    accepting = "" if report.stopped_accepting else " (new connections were not refused: the kernel did not allow it)"
    if report.stopped_accepting and not report.queue_accepted:
        accepting = (" (the listener was shut at once, the kernel refusing its socket filter: a connection still waiting "
                     "to be accepted, if there was one, was reset)")
    if report.drained:
        return f"every request it had taken in was answered first ({report.waited_s:.1f} s){accepting}"
    if report.in_flight_at_stop is None:
        return "its metrics API did not answer, so it was stopped without waiting"
    return (f"the drain timeout ({report.waited_s:.0f} s) passed with {report.in_flight_at_stop} request(s) still "
            f"unanswered{accepting}")


def add_drain_timeout_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--drain-timeout", type=_seconds, default=defaults.DRAIN_TIMEOUT_S, metavar="SECONDS",
                   help="before stopping, wait at most this long for every request TorchServe has taken in to be answered "
                        f"(0: stop at once; default {defaults.DRAIN_TIMEOUT_S}; docs/robustness.md, \"Stopping\")")


def _seconds(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a whole number of seconds, 0 or more; got {text!r}")
    return value
