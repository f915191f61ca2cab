"""tsvk's engine batcher (tools/engines/shared/batcher.py): batches up to the batch size, closes a batch the max delay
after its first request, lets one worker collect at a time, refuses past the queue size (bodies still being read
included), and puts a batch back first in line."""

from __future__ import annotations

import asyncio
import time

import pytest

from tsvk_tools.engines.shared.batcher import Batcher, Pending, QueueFull


def _run(coroutine):
    return asyncio.run(coroutine)


def test_a_full_batch_goes_at_once():
    async def scenario():
        batcher = Batcher(batch_size=3, max_batch_delay_ms=5000, queue_size=10)
        for index in range(4):
            batcher.submit(Pending({"body": bytes([index])}))
        started = time.monotonic()
        batch = await batcher.next_batch()
        return [p.request["body"] for p in batch], time.monotonic() - started, len(batcher)

    bodies, waited, left = _run(scenario())
    assert bodies == [b"\x00", b"\x01", b"\x02"] and waited < 0.5 and left == 1


def test_a_batch_closes_the_max_delay_after_its_first_request():
    async def scenario():
        batcher = Batcher(batch_size=8, max_batch_delay_ms=200, queue_size=10)
        batcher.submit(Pending({"body": b"first"}))

        async def late():
            await asyncio.sleep(0.05)
            batcher.submit(Pending({"body": b"second"}))

        started = time.monotonic()
        _, batch = await asyncio.gather(late(), batcher.next_batch())
        return len(batch), time.monotonic() - started

    size, waited = _run(scenario())
    assert size == 2 and 0.18 <= waited < 0.5


def test_two_idle_workers_do_not_split_a_burst():
    async def scenario():
        batcher = Batcher(batch_size=4, max_batch_delay_ms=200, queue_size=10)
        first = asyncio.create_task(batcher.next_batch())
        second = asyncio.create_task(batcher.next_batch())
        await asyncio.sleep(0.01)
        for index in range(4):
            batcher.submit(Pending({"body": bytes([index])}))
            await asyncio.sleep(0.01)
        batch = await first
        second.cancel()
        return len(batch)

    assert _run(scenario()) == 4


def test_a_full_queue_refuses_and_a_batch_put_back_goes_first():
    async def scenario():
        batcher = Batcher(batch_size=2, max_batch_delay_ms=0, queue_size=2)
        batcher.submit(Pending({"body": b"a"}))
        batcher.submit(Pending({"body": b"b"}))
        with pytest.raises(QueueFull):
            batcher.submit(Pending({"body": b"c"}))
        batch = await batcher.next_batch()
        batcher.submit(Pending({"body": b"d"}))
        batcher.put_back(batch)
        return [p.request["body"] for p in await batcher.next_batch()], [p.request["body"] for p in batcher.drain()]

    again, rest = _run(scenario())
    assert again == [b"a", b"b"] and rest == [b"d"]


def test_bodies_being_read_hold_places_so_the_queue_refuses_before_reading_more():
    async def scenario():
        batcher = Batcher(batch_size=2, max_batch_delay_ms=0, queue_size=2)
        batcher.submit(Pending({"body": b"queued"}))
        with batcher.place():  # a second body being read: the queue is full for a third
            assert batcher.full()
            with pytest.raises(QueueFull, match="1 requests are waiting and 1 being read"):
                with batcher.place():
                    pass
            batcher.submit(Pending({"body": b"read"}), placed=True)  # its own place, not counted twice
        with pytest.raises(QueueFull):
            batcher.submit(Pending({"body": b"past the queue"}))
        return [p.request["body"] for p in batcher.drain()]

    assert _run(scenario()) == [b"queued", b"read"]


def test_a_place_is_given_back_when_reading_the_body_fails():
    async def scenario():
        batcher = Batcher(batch_size=1, max_batch_delay_ms=0, queue_size=1)
        with pytest.raises(ConnectionResetError), batcher.place():
            raise ConnectionResetError("the client left")
        with batcher.place():
            batcher.submit(Pending({"body": b"next"}), placed=True)
        return len(batcher)

    assert _run(scenario()) == 1
