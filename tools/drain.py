"""Stop a TorchServe of our own without dropping the requests it has taken in.

What TorchServe 0.12 does by itself (frontend source, `ModelServer.stop`, the JVM's SIGTERM hook): it
closes its listening channels, then shuts its Netty event loops down, which closes every open
connection at once, requests in flight included; then it unregisters each model, and
`WorkLoadManager.modelChanged` kills the workers without waiting for the batch they hold. Scaling a
model to 0 workers or unregistering it through the management API takes the same path. And a SIGTERM
to the whole process group (what `tsvk stop` used to send) kills the workers at the same moment.
TorchServe has no way to stop accepting while it finishes what it has.

So the drain waits, before TorchServe is signalled, for a moment when TorchServe holds no request:
every inference request it has counted on arrival (`ts_inference_requests_total`, metrics API) has
been answered (a line in its access log, written as the answer goes out). Only then is TorchServe
signalled (its process session: frontend and workers; none has a request in flight), and killed if it
has not exited a few seconds later (its own shutdown waits out Netty's quiet periods: about 5 s idle).
A request that arrives after that moment and before the listener closes (a few milliseconds) finds the
connection closed: it was never taken in, and the client may send it again. The wait is bounded by
the drain timeout; past it TorchServe is stopped anyway. The OIP front is stopped first: it stops
accepting and finishes its requests while TorchServe still answers them.
"""

from __future__ import annotations

import argparse
import gzip
import os
import re
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import psutil

from . import defaults

ACCESS_LOG = "access_log.log"
ARRIVALS_METRIC = "ts_inference_requests_total"
FRONTEND_MARKER = "org.pytorch.serve.ModelServer"  # the Java frontend's main class on its command line
POLL_S = 0.02
# An inference path in TorchServe's access log ("POST /predictions/m HTTP/1.1" 200 47), and the statuses it sends
# before counting a request (unknown model, wrong method): those lines are no answer to a counted request.
_ANSWER = re.compile(rb'"(?:POST|PUT) /(?:predictions|explanations|v1/models|v2/models)/\S* HTTP/[\d.]+" (\d{3}) ')
_UNCOUNTED = {b"404", b"405"}


@dataclass
class DrainReport:
    drained: bool  # every counted request was answered before TorchServe was signalled
    waited_s: float
    in_flight_at_stop: int | None  # None: TorchServe's counts could not be read


class AccessLog:
    """Inference answers in TorchServe's access log, counted incrementally (the log rolls daily and at
    100 MiB into access_log.<day>.log.gz; rolled files are counted once each)."""

    def __init__(self, log_dir: Path):
        self.log_dir = Path(log_dir)
        self._offset, self._inode, self._current = 0, None, 0
        self._rolled: dict[tuple[str, int], int] = {}

    def answers(self) -> int:
        return self._count_current() + sum(self._count_rolled(path) for path in self.log_dir.glob("access_log.*.log.gz"))

    def _count_current(self) -> int:
        path = self.log_dir / ACCESS_LOG
        try:
            with open(path, "rb") as log:
                stat = path.stat()
                if stat.st_ino != self._inode or stat.st_size < self._offset:  # rolled over: a new file
                    self._offset, self._inode, self._current = 0, stat.st_ino, 0
                log.seek(self._offset)
                chunk = log.read()
        except OSError:
            return self._current
        complete = chunk[:chunk.rfind(b"\n") + 1]  # a line still being written is counted next time
        self._offset += len(complete)
        self._current += count_answers(complete)
        return self._current

    def _count_rolled(self, path: Path) -> int:
        key = (path.name, path.stat().st_size)
        if key not in self._rolled:
            try:
                self._rolled[key] = count_answers(gzip.decompress(path.read_bytes()))
            except (OSError, EOFError):
                return 0
        return self._rolled[key]


def count_answers(text: bytes) -> int:
    """Answers to counted inference requests in access-log text."""
    return sum(1 for match in _ANSWER.finditer(text) if match.group(1) not in _UNCOUNTED)


def arrivals(metrics_url: str) -> int | None:
    """Inference requests TorchServe has counted on arrival, all models; None when the metrics API does not say."""
    try:
        with urllib.request.urlopen(f"{metrics_url}/metrics?name[]={ARRIVALS_METRIC}", timeout=5) as response:
            text = response.read().decode(errors="replace")
    except (urllib.error.URLError, OSError):
        return None
    return int(sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(ARRIVALS_METRIC + "{")))


def wait_until_idle(log: AccessLog, metrics_url: str, timeout_s: float) -> DrainReport:
    """Until every request TorchServe counted has been answered (the answers are read first, then the
    arrivals, so a match means nothing was in flight when the answers were read), or `timeout_s`."""
    started = time.monotonic()
    while True:
        answered = log.answers()
        arrived = arrivals(metrics_url)
        if arrived is None:  # the metrics API is not answering: nothing to wait for that could be known
            return DrainReport(False, time.monotonic() - started, None)
        in_flight = max(0, arrived - answered)
        if in_flight == 0:
            return DrainReport(True, time.monotonic() - started, 0)
        if time.monotonic() - started >= timeout_s:
            return DrainReport(False, time.monotonic() - started, in_flight)
        time.sleep(POLL_S)


def frontend_pid(group: int) -> int | None:
    """The Java frontend in process group `group` (the launcher's child), if it runs."""
    for process in psutil.process_iter(["pid", "cmdline"]):
        try:
            if FRONTEND_MARKER in " ".join(process.info["cmdline"] or []) and os.getpgid(process.pid) == group:
                return process.pid
        except OSError:
            continue
    return None


def describe_drain(report: DrainReport | None) -> str:
    if report is None:
        return "nothing was running to drain"
    if report.drained:
        return f"every request it had taken in was answered first ({report.waited_s:.1f} s)"
    if report.in_flight_at_stop is None:
        return "its metrics API did not answer, so it was stopped without waiting"
    return f"the drain timeout ({report.waited_s:.0f} s) passed with {report.in_flight_at_stop} request(s) still unanswered"


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
