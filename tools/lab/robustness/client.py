"""Send requests to a running TorchServe the way the documented client does, and record each answer.

Every request carries the current inference key (re-read and resent when TorchServe refuses a key:
tools/keys.py) and an X-Request-Start stamp, so deadlines apply. Concurrency is a thread pool with
one HTTP session per thread; nothing here retries a request for any reason but a refused key.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import requests
from tsvk.worker import ARRIVAL_HEADER

from ...keys import call_with_fresh_key

CLIENT_ERROR = 0  # status recorded when no HTTP answer came back (timeout, connection reset)
ANSWER_BODY_KEPT = 64 * 1024
# The 503s docs/robustness.md documents: the handler's deadline refusal, TorchServe's full job queue, and tsvk's servers'
# connection bound (tools/oip/bounded_http.py).
QUEUE_FULL_MESSAGE = "has no worker to serve inference request"  # TorchServe's words for a full job queue (the engine's too)
DOCUMENTED_503 = ("deadline_exceeded", QUEUE_FULL_MESSAGE, "too_many_connections")


def is_documented_503(error: str | None, body: bytes) -> bool:
    text = f"{error or ''} {body[:4096].decode(errors='replace')}"
    return any(token in text for token in DOCUMENTED_503)


@dataclass(frozen=True)
class Target:
    """Where predictions go, and where the key file lives."""

    url: str  # .../predictions/<model>
    run_dir: Path
    timeout_s: float = 150.0


@dataclass(frozen=True)
class Answer:
    status: int
    seconds: float
    error: str | None  # our machine-readable code, TorchServe's `type`, or the client's exception
    source: str  # "tsvk" (the handler's body), "torchserve" (the frontend's), "client" (no answer)
    body: bytes = b""  # the answer's first ANSWER_BODY_KEPT bytes: what a correct answer is judged on

    @property
    def label(self) -> str:
        """The status as the reports count it: a 503 other than the documented overload or deadline
        refusal (a failed batch, a dead worker) is counted apart, as "503 <what it said>"."""
        if self.status == 503 and self.source != "hey" and not is_documented_503(self.error, self.body):
            return f"503 {self.error or 'undocumented'}"
        return str(self.status)


_local = threading.local()


def _session() -> requests.Session:
    if not hasattr(_local, "session"):
        _local.session = requests.Session()
    return _local.session


def send(target: Target, body: bytes, content_type: str = "application/octet-stream", key_procedure: bool = True,
         extra_headers: dict[str, str] | None = None) -> Answer:
    """POST one body; the documented key procedure unless `key_procedure` is off (then: no key at all)."""
    started = time.monotonic()

    def post(auth: dict[str, str]) -> tuple[int, bytes]:
        headers = {"Content-Type": content_type, ARRIVAL_HEADER: f"t={time.time():.6f}", **(extra_headers or {}), **auth}
        try:
            response = _session().post(target.url, data=body, headers=headers, timeout=target.timeout_s)
        except requests.RequestException as err:
            return CLIENT_ERROR, type(err).__name__.encode()
        return response.status_code, response.content

    status, raw = call_with_fresh_key(post, target.run_dir) if key_procedure else post({})
    return Answer(status, time.monotonic() - started, *_classify(status, raw), body=raw[:ANSWER_BODY_KEPT])


def _classify(status: int, raw: bytes) -> tuple[str | None, str]:
    if status == CLIENT_ERROR:
        return raw.decode(errors="replace"), "client"
    try:
        body = json.loads(raw)
    except ValueError:
        return None, "torchserve" if status != 200 else "tsvk"
    if isinstance(body, dict) and "error" in body and body.get("source") == "tsvk":
        return body["error"], "tsvk"
    if isinstance(body, dict) and status != 200:
        return body.get("type"), "torchserve"
    return None, "tsvk"


def send_all(jobs: Sequence[Callable[[], Answer]], concurrency: int) -> list[Answer]:
    """Run every job on `concurrency` threads; answers in job order."""
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        return list(pool.map(lambda job: job(), jobs))


def send_together(target: Target, bodies: Sequence[bytes]) -> list[Answer]:
    """All at once: a barrier releases one thread per body together (a burst, not a stream)."""
    barrier = threading.Barrier(len(bodies))

    def job(body: bytes) -> Answer:
        barrier.wait()
        return send(target, body)

    with ThreadPoolExecutor(max_workers=len(bodies)) as pool:
        return list(pool.map(job, bodies))


def closed_loop(target: Target, body: bytes, concurrency: int, until: Callable[[], bool]) -> list[tuple[float, Answer]]:
    """`concurrency` clients each sending the next request when the last is answered, until `until()`."""
    answers: list[tuple[float, Answer]] = []
    lock = threading.Lock()

    def client() -> None:
        while not until():
            sent_at = time.monotonic()
            answer = send(target, body)
            with lock:
                answers.append((sent_at, answer))

    threads = [threading.Thread(target=client, daemon=True) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100) by nearest rank, or None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def histogram(answers: Sequence[Answer]) -> dict[str, int]:
    """Answers per status label (an undocumented 503 apart from the documented ones: Answer.label)."""
    counts: dict[str, int] = {}
    for answer in answers:
        counts[answer.label] = counts.get(answer.label, 0) + 1
    return dict(sorted(counts.items()))


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None
