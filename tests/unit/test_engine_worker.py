"""A worker of the kserve engine warms its answer path up once it has said READY (tools/engines/kserve/worker.py):
one synthetic photo answered unless a batch already waits, its metric samples dropped, a failure only logged. The
service here records what it is asked, on the worker's side of a real socket pair; the batches come over the real
wire format."""

from __future__ import annotations

import socket
from dataclasses import dataclass

from tsvk.common.defaults import MAX_PIXELS
from tsvk.preprocess.decode import probe
from tsvk_tools.engines.kserve import wire
from tsvk_tools.engines.shared.metrics import RecordingMetrics
from tsvk_tools.engines.kserve.worker import WARM_UP_PHOTO_SIDE, serve_batches, warm_up, warm_up_photo


@dataclass
class _Outcome:
    statuses: list[int]
    answers: list[bytes]


class _RecordingService:
    """The part of an archive's VisionService a worker calls: answer_batch(bodies, arrivals), recording a metric
    sample per batch as the real one does through its metrics."""

    def __init__(self, metrics: RecordingMetrics, fail_first: bool = False):
        self.metrics = metrics
        self.fail_first = fail_first
        self.batches: list[tuple[list[dict], list]] = []

    def answer_batch(self, data, arrivals):
        self.batches.append((list(data), list(arrivals)))
        self.metrics.add_counter("HandlerBatches", 1)
        if self.fail_first and len(self.batches) == 1:
            raise RuntimeError("first-use failure")
        return _Outcome([200] * len(data), [b"ok"] * len(data))


def test_a_ready_worker_answers_a_warm_up_photo_and_drops_its_metrics():
    server, worker = socket.socketpair()
    metrics = RecordingMetrics()
    service = _RecordingService(metrics)
    assert warm_up(worker, service, metrics) is True
    [(bodies, arrivals)] = service.batches
    assert bodies == [{"body": warm_up_photo()}] and arrivals == [None]
    assert metrics.take() == []  # the first real batch reports only its own samples
    server.close()
    worker.close()


def test_a_batch_already_waiting_is_taken_at_once_without_a_warm_up():
    server, worker = socket.socketpair()
    metrics = RecordingMetrics()
    service = _RecordingService(metrics)
    wire.send(server, (7, [{"body": b"photo"}], [None]))
    assert warm_up(worker, service, metrics) is False
    server.shutdown(socket.SHUT_WR)
    assert serve_batches(worker, service, metrics) == 0
    assert service.batches == [([{"body": b"photo"}], [None])]
    batch_id, answers, samples = wire.receive(server)
    assert (batch_id, answers, [name for _, name, _, _ in samples]) == (7, [(200, b"ok")], ["HandlerBatches"])


def test_a_warm_up_that_fails_is_logged_and_the_worker_serves(caplog):
    server, worker = socket.socketpair()
    metrics = RecordingMetrics()
    service = _RecordingService(metrics, fail_first=True)
    assert warm_up(worker, service, metrics) is True
    assert "warm-up answer failed" in caplog.text and metrics.take() == []
    wire.send(server, (1, [{"body": b"photo"}], [None]))
    server.shutdown(socket.SHUT_WR)
    assert serve_batches(worker, service, metrics) == 0
    assert wire.receive(server)[1] == [(200, b"ok")]


def test_the_warm_up_photo_is_an_image_the_handlers_admit():
    image = probe(warm_up_photo(), MAX_PIXELS)
    assert (image.format, image.width, image.height) == ("JPEG", WARM_UP_PHOTO_SIDE, WARM_UP_PHOTO_SIDE)
