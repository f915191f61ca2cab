"""A batch handed to a worker, on the server's side (tools/engines/kserve/pool.py `WorkerProcess.run`), over a real
socket pair: a worker that reads and answers gets the photo whole, as one bytearray, and its answers come back; a
worker that stops reading its socket holds the send of a large photo, and is given up after the response timeout as
one that stops answering is (before, the send waited for it forever)."""

from __future__ import annotations

import asyncio
import socket
import threading
import types

import pytest

from tsvk_tools.engines.kserve import wire
from tsvk_tools.engines.kserve.pool import WorkerGone, WorkerProcess
from tsvk_tools.engines.shared.batcher import Pending

PHOTO = bytes(range(256)) * (64 << 10)  # 16 MiB: more than a socket pair buffers, so the send waits for the reader


def _worker(channel: socket.socket, timeout_s: float) -> WorkerProcess:
    """A WorkerProcess on the server's end of a socket pair, as `start` leaves it once the worker said READY."""
    worker = WorkerProcess(types.SimpleNamespace(name="m", response_timeout_s=timeout_s), start=None, number=0)
    channel.setblocking(False)
    worker.channel = channel
    return worker


def _run(worker: WorkerProcess, body: bytes):
    async def scenario():
        return await asyncio.wait_for(worker.run([Pending({"body": body})]), 30)

    return asyncio.run(scenario())


def test_a_worker_that_reads_gets_the_photo_whole_and_its_answer_comes_back():
    ours, theirs = socket.socketpair()
    seen = []

    def answer() -> None:
        batch_id, requests, _ = wire.receive(theirs)
        seen.append(requests[0]["body"])
        wire.send(theirs, (batch_id, [(200, b"ok")], []))

    reader = threading.Thread(target=answer)
    reader.start()
    assert _run(_worker(ours, 10), PHOTO) == ([(200, b"ok")], [])
    reader.join(5)
    assert type(seen[0]) is bytearray and seen[0] == PHOTO
    ours.close()
    theirs.close()


def test_a_worker_that_stops_reading_is_given_up_after_the_response_timeout():
    ours, theirs = socket.socketpair()  # nothing reads `theirs`
    with pytest.raises(WorkerGone, match="TimeoutError"):
        _run(_worker(ours, 1), PHOTO)
    ours.close()
    theirs.close()
