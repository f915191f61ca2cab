"""Stop a TorchServe of our own without dropping a request it has taken in: TorchServe's requests counted for the
drain (tools/engines/shared/drain.py), from its metrics API and its access log.

What TorchServe 0.12 does by itself (frontend source, `ModelServer.stop`, the JVM's SIGTERM hook): it
closes its listening channels, then shuts its Netty event loops down, which closes every open
connection at once, requests in flight included; then it unregisters each model, and
`WorkLoadManager.modelChanged` kills the workers without waiting for the batch they hold. Scaling a
model to 0 workers or unregistering it through the management API takes the same path. TorchServe has
no way to stop accepting while it finishes what it has, so the stop does that from outside, in order:

1. Stop accepting: the frontend's listening sockets (all but the management and metrics APIs) refuse new
   connections, without resetting one the kernel had completed but the frontend not yet accepted
   (tools/engines/shared/listeners.py). Where the kernel does not allow it (no pidfd_getfd, a seccomp filter),
   TorchServe goes on accepting and the steps below still hold, with the window described at the end.
2. Answer what was taken in: read how many requests TorchServe has counted on arrival, per model
   (`ts_inference_requests_total`, metrics API): these are the accepted requests. Wait until its access
   log (a line per answer, written as the answer goes out) holds at least as many answers per model.
   TorchServe queues a model's requests first in, first out, so by then every accepted request has been
   answered or is in a worker's batch, which the worker finishes.
3. Refuse the rest: create the stop marker (handlers/tsvk/worker/stopping.py); a worker answers every request of
   a batch it starts from then on with 503 `server_stopping` at once. Those are requests that arrived
   after the stop began, on connections clients kept open (or on new ones where step 1 was not
   possible); each gets an answer saying to send it again, not a closed connection.
4. Wait until TorchServe holds no request (every counted request answered, and no connection holding
   bytes the frontend has not read; refusals take no longer than the batch delay), let SETTLE_S pass so
   the last answers leave the frontend, check again, then signal its process session (frontend and
   workers), and kill what has not exited a few seconds later (its own shutdown waits out Netty's quiet periods: about 5 s idle).

Steps 2-4 are bounded together by the drain timeout; past it TorchServe is stopped anyway. What remains:
a request that arrives on a kept-alive connection (or, without step 1, a new one) between the last check
of step 4 and the moment the frontend closes its connections (a few milliseconds) is cut. The OIP front
is stopped before all this: it stops accepting and finishes its requests while TorchServe still answers.
"""

from __future__ import annotations

import gzip
import os
import re
import ssl
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import psutil


ACCESS_LOG = "access_log.log"
ARRIVALS_METRIC = "ts_inference_requests_total"
FRONTEND_MARKER = "org.pytorch.serve.ModelServer"  # the Java frontend's main class on its command line
# An inference request in TorchServe's access log ("POST /predictions/m HTTP/1.1" 200 47): its path, and the
# status; the statuses it sends before counting a request (unknown model, wrong method) answer no counted request.
_ANSWER = re.compile(rb'"(?:POST|PUT) (/(?:predictions|explanations|v1/models|v2/models)/\S*) HTTP/[\d.]+" (\d{3}) ')
_UNCOUNTED = {b"404", b"405"}
# The model an inference path names: /predictions/<m>[/<version>], /explanations/<m>, /v1/models/<m>:predict,
# /v2/models/<m>[/versions/<v>]/infer.
_MODEL_IN_PATH = re.compile(rb"^/(?:predictions|explanations|v[12]/models)/([^/:?\s]+)")
_MODEL_LABEL = re.compile(r'model_name="([^"]*)"')


class AccessLog:
    """Inference answers per model in TorchServe's access log, counted incrementally (the log rolls daily and at
    100 MiB into access_log.<day>.log.gz; rolled files are counted once each)."""

    def __init__(self, log_dir: Path):
        self.log_dir = Path(log_dir)
        self._offset, self._inode, self._current = 0, None, Counter()
        self._rolled: dict[tuple[str, int], Counter] = {}

    def answers(self) -> Counter:
        total = Counter(self._count_current())
        for path in self.log_dir.glob("access_log.*.log.gz"):
            total.update(self._count_rolled(path))
        return total

    def _count_current(self) -> Counter:
        path = self.log_dir / ACCESS_LOG
        try:
            with open(path, "rb") as log:
                stat = path.stat()
                if stat.st_ino != self._inode or stat.st_size < self._offset:  # rolled over: a new file
                    self._offset, self._inode, self._current = 0, stat.st_ino, Counter()
                log.seek(self._offset)
                chunk = log.read()
        except OSError:
            return self._current
        complete = chunk[:chunk.rfind(b"\n") + 1]  # a line still being written is counted next time
        self._offset += len(complete)
        self._current.update(count_answers(complete))
        return self._current

    def _count_rolled(self, path: Path) -> Counter:
        key = (path.name, path.stat().st_size)
        if key not in self._rolled:
            try:
                self._rolled[key] = count_answers(gzip.decompress(path.read_bytes()))
            except (OSError, EOFError):
                return Counter()
        return self._rolled[key]


def count_answers(text: bytes) -> Counter:
    """Answers to counted inference requests in access-log text, per model."""
    answers: Counter = Counter()
    for match in _ANSWER.finditer(text):
        model = _MODEL_IN_PATH.match(match.group(1))
        if match.group(2) not in _UNCOUNTED and model:
            answers[model.group(1).decode(errors="replace")] += 1
    return answers


def arrivals(metrics_url: str, tls: ssl.SSLContext | None = None) -> Counter | None:
    """Inference requests TorchServe has counted on arrival, per model; None when the metrics API does not say. `tls`
    verifies an https metrics address (TorchServeRun.client_tls)."""
    try:
        with urllib.request.urlopen(f"{metrics_url}/metrics?name[]={ARRIVALS_METRIC}", timeout=5, context=tls) as response:
            text = response.read().decode(errors="replace")
    except (urllib.error.URLError, OSError):
        return None
    counted: Counter = Counter()
    for line in text.splitlines():
        model = _MODEL_LABEL.search(line) if line.startswith(ARRIVALS_METRIC + "{") else None
        if model:
            counted[model.group(1)] += int(float(line.rsplit(" ", 1)[1]))
    return counted


@dataclass
class TorchServeCounts:
    """`Counts` read from TorchServe itself: its metrics API and its access log."""

    log: AccessLog
    metrics_url: str
    tls: ssl.SSLContext | None = None

    def arrived(self) -> Counter | None:
        return arrivals(self.metrics_url, self.tls)

    def answered(self) -> Counter:
        return self.log.answers()


def frontend_pid(group: int) -> int | None:
    """The Java frontend in process group `group` (the launcher's child), if it runs."""
    for process in psutil.process_iter(["pid", "cmdline"]):
        try:
            if FRONTEND_MARKER in " ".join(process.info["cmdline"] or []) and os.getpgid(process.pid) == group:
                return process.pid
        except OSError:
            continue
    return None

