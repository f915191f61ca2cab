"""The `large uploads` part of `tsvk robustness`: can a burst of phone-size uploads take a server past its memory?

Sixteen 48 MP JPEGs as a phone sends them (`tools/lab/bench/sent_photos.py`'s, about 11 MB each, EXIF orientation 6;
one photo, cached under .tsvk/bench, is sent by every client) are uploaded at once, each with a Content-Length, to a
server of its own: two workers on `tsvk config`'s plan, with a job queue of four (`job_queue_size`,
`defaults.LARGE_UPLOADS_QUEUE`), so that the burst holds four times what the queue takes. Each client sends its body
in 64 KiB pieces and stops once the server has answered (raw_http.py), so it knows how much of a refused upload it
had sent; the server read at most that. Meanwhile the RSS of every server process is sampled, each process apart.

What must hold: every upload answered 200 or 503 queue-full (no connection cut without an answer, no 500); the queue
refused some; on an engine that counts an upload against the queue while it reads it (tsvk's: Batcher.place), each
refusal answered before its body was sent whole; the server's RSS growth within the bodies the config lets it hold
(`UploadBounds.server_growth_mb`); each worker's peak RSS within the memory `tsvk config` plans a worker at
(`worker_plan.worker_estimate_mb`). TorchServe's Netty frontend reads every body whole before it looks at the queue,
which tsvk cannot change: what it does is reported under `weaknesses`, not failed.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from ... import defaults
from ...config.worker_plan import worker_estimate_mb
from ...engines.torchserve.server import TORCHSERVE
from ..bench.sent_photos import PHOTOS, SentPhoto, build_set
from . import checks, watch
from .checks import Verdict
from .client import QUEUE_FULL_MESSAGE, percentile, send
from .clients import BURST_MARGIN_MB, max_request_bytes
from .parts import Service
from .raw_http import DECLARED, NO_ANSWER, send_body

WORKERS = 2
UPLOAD_PHOTO = next(photo for photo in PHOTOS if photo.size == "48mp")  # the set's 48 MP JPEG, stored sideways
SERVER = "frontend"  # watch's role for the server process: TorchServe's Java frontend, or the engine's server
# Copies of one body a server may hold at once: read, its pieces and their join; handed to a worker, the body (held
# until answered), its pickle and the message around it (the engine's; TorchServe's Netty buffers likewise).
BODY_COPIES = 3
OK, QUEUE_FULL, NOT_ANSWERED = "200", "503 queue full", "no answer"

ANSWERED = "every upload answered 200 or 503 queue full"
REFUSED = "uploads past the queue refused 503"
REFUSED_EARLY = "each refused upload answered before its body was sent whole"
SERVER_BOUNDED = "server RSS growth within the bodies the config lets it hold"
WORKERS_BOUNDED = "each worker's peak RSS within tsvk config's estimate of a worker"
GOOD_AFTER = "a good request answered 200 after the burst"
_NETTY = "TorchServe's Netty frontend (HttpObjectAggregator) reads each body whole, up to max_request_size, before the request reaches "
KNOWN_WEAKNESSES = {
    TORCHSERVE: {
        REFUSED_EARLY: _NETTY + "the job queue: a refused upload has been sent and buffered whole",
        SERVER_BOUNDED: _NETTY + "the job queue: every upload of a burst is buffered at once, not only the queue's places",
    },
}


@dataclass(frozen=True)
class UploadBounds:
    """What the config lets a server and its workers hold, and the bounds derived from it (docs/robustness.md,
    "Large uploads")."""

    job_queue_size: int
    workers: int
    batch: int
    max_request_bytes: int
    worker_estimate_mb: float  # tsvk config's plan of one worker's memory (worker_plan.worker_estimate_mb)

    def __post_init__(self):
        for name in ("job_queue_size", "workers", "batch", "max_request_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")

    @property
    def bodies_held(self) -> int:
        """Uploads the server may hold at once: one per queue place (being read, or waiting for a worker) and one per
        place in each worker's batch (held until answered); more are refused 503 before they are read."""
        return self.job_queue_size + self.workers * self.batch

    @property
    def server_growth_mb(self) -> float:
        """The server process's RSS growth bound: BODY_COPIES of each upload it may hold, at max_request_size, and the
        hostile-clients part's margin."""
        return BODY_COPIES * self.bodies_held * self.max_request_bytes / 2**20 + BURST_MARGIN_MB


def bounds_of(service: Service, archive: Path) -> UploadBounds:
    """The bounds of the running service's config, its worker estimate from the served archive."""
    properties = service.run.properties
    return UploadBounds(int(properties["job_queue_size"]), service.workers, service.batches.get(service.model, 1),
                        max_request_bytes(service), worker_estimate_mb(archive))


def served_properties(queue: int = defaults.LARGE_UPLOADS_QUEUE) -> dict[str, str]:
    """config.properties for the part's server beyond `tsvk config`'s: the small job queue."""
    return {"job_queue_size": str(queue)}


def phone_photo(cache_dir: Path = Path(defaults.BENCH_CACHE_DIR), photo: SentPhoto = UPLOAD_PHOTO) -> tuple[SentPhoto, bytes]:
    """The photo every client uploads, made once by sent_photos and read from its cache after."""
    return photo, build_set(cache_dir, (photo,))[0].file.read_bytes()


@dataclass(frozen=True)
class Upload:
    """One client's upload: what it was answered, and how much of its body it had sent by then."""

    status: int
    outcome: str  # OK, QUEUE_FULL, NOT_ANSWERED, or "<status>" for anything else
    sent: int
    seconds: float


def outcome_of(status: int, body: bytes) -> str:
    if status == 200:
        return OK
    if status == 503 and QUEUE_FULL_MESSAGE.encode() in body:
        return QUEUE_FULL
    return NOT_ANSWERED if status == NO_ANSWER else str(status)


def large_uploads(service: Service, engine: str, uploads: int, photo: bytes, archive: Path, about: SentPhoto = UPLOAD_PHOTO) -> dict:
    """`uploads` clients send `photo` at once (module docstring); the figures and checks, TorchServe's weaknesses apart."""
    bounds = bounds_of(service, archive)
    barrier = threading.Barrier(uploads)
    headers = {**service.run.headers("inference"), "Content-Type": "image/jpeg"}

    def one(_) -> Upload:
        barrier.wait()
        started = time.monotonic()
        answer = send_body(service.run.url("inference"), "POST", f"/predictions/{service.model}", headers, len(photo), DECLARED,
                           timeout_s=service.client_timeout_s, content=photo)
        return Upload(answer.status, outcome_of(answer.status, answer.body), answer.sent, time.monotonic() - started)

    listed = service.worker_pids() or set()
    with watch.PeakRssByProcess(service.run) as rss, ThreadPoolExecutor(uploads) as pool:
        answered = list(pool.map(one, range(uploads)))
    good = send(service.target, service.photo)
    workers = {f"worker {pid}" for pid in listed | (service.worker_pids() or set())}
    figures = {"photo": {"name": about.name, "is": about.describe(), "bytes": len(photo), "same photo for every upload": True},
               **upload_figures(answered, len(photo), bounds, rss.before_mb, rss.peaks_mb, workers), "rss_samples": rss.samples,
               "good_request_after": good.status}
    verdicts = judge(answered, len(photo), bounds, rss.before_mb, rss.peaks_mb, workers)
    verdicts[GOOD_AFTER] = checks.all_status([good.status], 200, "the good request after")
    return {**figures, **checks.judged_with_weaknesses(verdicts, KNOWN_WEAKNESSES.get(engine, {}))}


def upload_figures(answered: Sequence[Upload], size: int, bounds: UploadBounds, before_mb: Mapping[str, float],
                   peaks_mb: Mapping[str, float], workers: set[str]) -> dict:
    """What the report shows: answers by outcome, how much of the refused bodies was sent, each process's memory (its
    role: the server, a worker the engine lists, or another process, such as the engine's fork server, which
    carries the workers' command line but serves nothing)."""
    refused = [u for u in answered if u.outcome == QUEUE_FULL]
    accepted = [u for u in answered if u.outcome == OK]
    counts: dict[str, int] = {}
    for upload in answered:
        counts[upload.outcome] = counts.get(upload.outcome, 0) + 1
    return {
        "uploads": len(answered),
        "config": {"job_queue_size": bounds.job_queue_size, "workers": bounds.workers, "batch": bounds.batch,
                   "max_request_size": bounds.max_request_bytes},
        "answers": dict(sorted(counts.items())),
        "refused_sent_bytes": {"max": max((u.sent for u in refused), default=None), "total": sum(u.sent for u in refused),
                               "of": size * len(refused), "whole": sum(1 for u in refused if u.sent >= size)},
        "refused_seconds_max": _rounded(max((u.seconds for u in refused), default=None)),
        "accepted_seconds": {"p50": _rounded(percentile([u.seconds for u in accepted], 50)),
                             "max": _rounded(max((u.seconds for u in accepted), default=None))},
        "rss_mb": {name: {"role": _role(name, workers), "before": round(before_mb.get(name, 0.0), 1), "peak": round(peak, 1),
                          "growth": round(peak - before_mb.get(name, 0.0), 1)} for name, peak in sorted(peaks_mb.items())},
        "server_growth_in_uploads": _in_uploads(before_mb, peaks_mb, size),
        "bounds": {"server_growth_mb": round(bounds.server_growth_mb, 1), "uploads_held": bounds.bodies_held, "body_copies": BODY_COPIES,
                   "margin_mb": BURST_MARGIN_MB, "worker_peak_mb": round(bounds.worker_estimate_mb, 1)},
    }


def _role(name: str, workers: set[str]) -> str:
    return "server" if name == SERVER else "worker" if name in workers else "other"


def _in_uploads(before_mb: Mapping[str, float], peaks_mb: Mapping[str, float], size: int) -> float | None:
    """The server's growth as a count of the uploads' bodies: how many it held at its peak, copies included."""
    if SERVER not in before_mb or SERVER not in peaks_mb:
        return None
    return round((peaks_mb[SERVER] - before_mb[SERVER]) * 2**20 / size, 1)


def judge(answered: Sequence[Upload], size: int, bounds: UploadBounds, before_mb: Mapping[str, float],
          peaks_mb: Mapping[str, float], workers: set[str]) -> dict[str, Verdict]:
    """The part's checks from what the clients saw and what the sampler found (no evidence: failed)."""
    refused = [u for u in answered if u.outcome == QUEUE_FULL]
    return {
        ANSWERED: _answered(answered),
        REFUSED: checks.any_refused(len(refused) if answered else None),
        REFUSED_EARLY: refused_early(refused, size),
        SERVER_BOUNDED: server_bounded(before_mb, peaks_mb, bounds),
        WORKERS_BOUNDED: workers_bounded(before_mb, peaks_mb, workers, bounds),
    }


def _answered(answered: Sequence[Upload]) -> Verdict:
    if not answered:
        return checks.failed("no upload was sent")
    others = {u.outcome for u in answered} - {OK, QUEUE_FULL}
    if others:
        bad = {o: sum(1 for u in answered if u.outcome == o) for o in sorted(others)}
        return checks.failed(f"{sum(bad.values())} of {len(answered)} uploads answered otherwise: {bad}")
    accepted = sum(1 for u in answered if u.outcome == OK)
    return checks.held(f"all {len(answered)} answered: {accepted} 200, {len(answered) - accepted} 503 queue full")


def refused_early(refused: Sequence[Upload], size: int) -> Verdict:
    """Every refused upload's client had sent less than its whole body when the answer came."""
    if not refused:
        return checks.failed("no upload was refused")
    whole = [u.sent for u in refused if u.sent >= size]
    if whole:
        return checks.failed(f"{len(whole)} of {len(refused)} refused uploads were sent whole ({size} bytes) before their 503")
    return checks.held(f"all {len(refused)} refused after at most {max(u.sent for u in refused)} of {size} bytes sent")


def server_bounded(before_mb: Mapping[str, float], peaks_mb: Mapping[str, float], bounds: UploadBounds) -> Verdict:
    if SERVER not in before_mb or SERVER not in peaks_mb:
        return checks.failed("the server process was not found")
    what = (f"server RSS growth (MiB; bound: {BODY_COPIES} x {bounds.bodies_held} uploads held x max_request_size "
            f"+ {BURST_MARGIN_MB:g} MiB)")
    return checks.below(peaks_mb[SERVER] - before_mb[SERVER], bounds.server_growth_mb, what)


def workers_bounded(before_mb: Mapping[str, float], peaks_mb: Mapping[str, float], workers: set[str], bounds: UploadBounds) -> Verdict:
    """Each worker the engine listed (at least the config's count) peaked under the planner's estimate of a worker: what
    `tsvk config` counts a worker as when it decides how many fit in memory. The reason gives each worker's RSS before
    the burst too, so an estimate exceeded at rest is told apart from one the uploads exceeded."""
    peaks = {name: mb for name, mb in peaks_mb.items() if name in workers}
    if len(peaks) < bounds.workers:
        return checks.failed(f"{len(peaks)} worker(s) found, {bounds.workers} configured")
    over = [f"{name} {mb:.0f} MiB ({before_mb.get(name, float('nan')):.0f} before the burst)" for name, mb in sorted(peaks.items())
            if mb >= bounds.worker_estimate_mb]
    if over:
        return checks.failed(f"over the estimate of {bounds.worker_estimate_mb:.0f} MiB: {'; '.join(over)}")
    return checks.held(f"{len(peaks)} workers, peaks {', '.join(f'{mb:.0f}' for mb in sorted(peaks.values()))} MiB, "
                       f"under the estimate of {bounds.worker_estimate_mb:.0f} MiB")


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 3)
