"""A closed-loop load generator: `concurrency` clients, each sending its next request when the last
one is answered, until `total` requests are done.

Python threads with one `requests.Session` each are plenty at a few hundred requests per second, and
cost the measured system almost nothing (a blocked thread uses no CPU). Latency is per request, from
just before sending to the end of reading the answer.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import requests

from .stats import latency_summary, rate

TIME_BOUNDED_JOBS = 10**9  # a time-bounded load stops at its deadline, never at a count


def identity(body: bytes) -> bytes:
    """A target's make_body when the photo's bytes are the request body (TorchServe's /predictions)."""
    return body


@dataclass(frozen=True)
class HttpTarget:
    """How to ask one system to classify one image, and how to read its answer."""

    url: str
    make_body: Callable[[bytes], bytes]  # JPEG bytes -> request body
    content_type: str = "application/octet-stream"
    timeout_s: float = 300

    def post(self, session: requests.Session, body: bytes) -> requests.Response:
        return session.post(self.url, data=body, headers={"Content-Type": self.content_type}, timeout=self.timeout_s)


@dataclass(frozen=True)
class RequestRecord:
    started: float  # time.monotonic()
    finished: float
    status: int  # HTTP status; 0 when the connection failed
    top1: str | None = None
    error: str = ""
    image: int = 0  # index of the photo sent

    @property
    def latency_s(self) -> float:
        return self.finished - self.started

    @property
    def ok(self) -> bool:
        return self.status == 200


def top1_of(answer) -> str | None:
    """The best label of a {label: probability} answer (TorchServe's shape, which every system here returns)."""
    if isinstance(answer, list) and answer:
        answer = answer[0]
    if isinstance(answer, dict) and isinstance(answer.get("outputs"), list):  # an Open Inference Protocol answer
        labels = next((o.get("data") for o in answer["outputs"] if isinstance(o, dict) and o.get("name") == "labels"), None)
        return str(labels[0]) if labels else None
    if isinstance(answer, dict) and answer and all(isinstance(v, (int, float)) for v in answer.values()):
        return max(answer, key=answer.get)
    return None


def send_one(target: HttpTarget, session: requests.Session, body: bytes, image: int = 0) -> RequestRecord:
    started = time.monotonic()
    try:
        response = target.post(session, body)
        finished = time.monotonic()
    except requests.RequestException as err:
        return RequestRecord(started, time.monotonic(), 0, error=f"{type(err).__name__}: {err}"[:200], image=image)
    if response.status_code != 200:
        return RequestRecord(started, finished, response.status_code, error=response.text[:200], image=image)
    try:
        top1 = top1_of(response.json())
    except ValueError:
        top1 = None
    return RequestRecord(started, finished, 200, top1, image=image)


def run_closed_loop(target: HttpTarget, images: Sequence[bytes], total: int, concurrency: int,
                    until: float | None = None) -> list[RequestRecord]:
    """Send `total` requests from `concurrency` clients, cycling over `images`; records in completion order.
    With `until` (a time.monotonic() value) no request is sent after it: a time-bounded load."""
    if total < 1 or concurrency < 1 or not images:
        raise ValueError(f"need total >= 1, concurrency >= 1 and at least one image; got {total}, {concurrency}, {len(images)}")
    bodies = [target.make_body(image) for image in images]  # encoded once: no client work while measuring
    tickets = itertools.count()
    records: list[RequestRecord] = []
    lock = threading.Lock()

    def client() -> None:
        with requests.Session() as session:
            while (until is None or time.monotonic() < until) and (ticket := next(tickets)) < total:  # count() is atomic under the GIL
                record = send_one(target, session, bodies[ticket % len(bodies)], ticket % len(bodies))
                with lock:
                    records.append(record)

    threads = [threading.Thread(target=client, name=f"client-{i}", daemon=True) for i in range(min(concurrency, total))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return records


def summarize_records(records: Sequence[RequestRecord]) -> dict:
    """Throughput over the measured span (first send to last answer), latencies of the successes."""
    ok = [r for r in records if r.ok]
    span = (max(r.finished for r in records) - min(r.started for r in records)) if records else 0.0
    errors = [r for r in records if not r.ok]
    return {
        "requests": len(records),
        "errors": len(errors),
        "first_error": errors[0].error if errors else "",
        "wall_s": round(span, 2),
        "throughput_ips": _round(rate(len(ok), span)),
        "latency_ms": latency_summary([r.latency_s for r in ok]),
        "top1": top1_by_image(ok),
    }


def top1_by_image(records: Sequence[RequestRecord]) -> dict[str, str]:
    """Photo index -> the label answered most often: the same weights must give the same answer everywhere."""
    labels: dict[int, list[str]] = {}
    for record in records:
        if record.top1:
            labels.setdefault(record.image, []).append(record.top1)
    return {str(i): max(set(found), key=found.count) for i, found in sorted(labels.items())}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)
