"""tsvk's dynamic batcher: requests wait in one queue per model; an idle worker takes up to the batch size, waiting at
most the max batch delay after the first for the batch to fill.

As TorchServe 0.12 does (its Model.pollBatch), one worker at a time collects a batch, so two idle workers do not split
a burst into halves; a full queue (job_queue_size) is refused at once. Deadlines are checked where a batch is taken
up, in the worker, from each request's X-Request-Start (handlers/tsvk/worker/deadline.py), exactly as under TorchServe.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from dataclasses import dataclass, field
from typing import Any, Iterator


class QueueFull(Exception):
    """The model's queue holds job_queue_size requests already."""


@dataclass
class Pending:
    """One request as a handler receives it (TorchServe's dict of named inputs), and where its answer goes."""

    request: dict[str, Any]
    arrival_s: float | None = None  # X-Request-Start, read by the worker's deadline check
    submitted_s: float = field(default_factory=time.monotonic)  # when it entered the queue (the metrics' queue time)
    answer: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())

    def settle(self, status: int, body: bytes) -> None:
        if not self.answer.done():
            self.answer.set_result((status, body))


class Batcher:
    def __init__(self, batch_size: int, max_batch_delay_ms: float, queue_size: int):
        self.batch_size = batch_size
        self.max_batch_delay_ms = max_batch_delay_ms
        self.queue_size = queue_size
        self._waiting: collections.deque[Pending] = collections.deque()
        self._reading = 0  # places held by requests whose bodies are still being read (`place`)
        self._arrived = asyncio.Event()
        self._collecting = asyncio.Lock()

    def __len__(self) -> int:
        return len(self._waiting)

    def full(self) -> bool:
        return len(self._waiting) + self._reading >= self.queue_size

    @contextlib.contextmanager
    def place(self) -> Iterator[None]:
        """A place in the queue held while a request's body is read, then handed to it by `submit(..., placed=True)`:
        no more bodies are read at once than the queue would take, so a burst of large uploads past it is refused
        (QueueFull) before its bodies are buffered. Given back however the reading ends."""
        if self.full():
            raise QueueFull(self._full_message())
        self._reading += 1
        try:
            yield
        finally:
            self._reading -= 1

    def submit(self, pending: Pending, placed: bool = False) -> Pending:
        """Queue `pending`; `placed`: inside `place()`, whose place it takes (the place is not counted twice)."""
        if len(self._waiting) + self._reading - int(placed) >= self.queue_size:
            raise QueueFull(self._full_message())
        self._waiting.append(pending)
        self._arrived.set()
        return pending

    def _full_message(self) -> str:
        return f"{len(self._waiting)} requests are waiting and {self._reading} being read already (job_queue_size {self.queue_size})"

    def put_back(self, batch: list[Pending]) -> None:
        """A batch no worker could take (its worker had died): first in line again, in its order."""
        self._waiting.extendleft(reversed(batch))
        self._arrived.set()

    async def next_batch(self) -> list[Pending]:
        """Up to batch_size requests: the first one waited for, the rest for at most max_batch_delay_ms after it."""
        async with self._collecting:
            batch = [await self._take()]
            close_at = time.monotonic() + self.max_batch_delay_ms / 1e3
            while len(batch) < self.batch_size:
                if not self._waiting:
                    left = close_at - time.monotonic()
                    if left <= 0 or not await self._arrival_within(left):
                        break
                batch.append(self._waiting.popleft())
            return batch

    async def _take(self) -> Pending:
        while not self._waiting:
            self._arrived.clear()
            await self._arrived.wait()
        return self._waiting.popleft()

    async def _arrival_within(self, seconds: float) -> bool:
        self._arrived.clear()
        try:
            await asyncio.wait_for(self._arrived.wait(), seconds)
        except asyncio.TimeoutError:
            return False
        return bool(self._waiting)

    def drain(self) -> list[Pending]:
        """Everything still waiting, taken out (to be answered by whoever stops the server)."""
        taken = list(self._waiting)
        self._waiting.clear()
        return taken
