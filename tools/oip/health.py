"""TorchServe's health as the front reports it: its /ping, asked at most once per `HEALTH_TTL_S`.

KServe's data plane asks a model's readiness before every inference. Asking TorchServe each time cost
a second HTTP round trip per image, more of the front's CPU than the forwarding itself, on the same
cores the model runs on. One answer is shared for a second by every model and by the server's own
readiness; callers that arrive while a ping is in flight wait for that ping instead of sending more.
A stale "ready" costs nothing worse than the forwarded request failing with TorchServe's own answer.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Callable

from .upstream import TorchServeClient, UpstreamError

HEALTH_TTL_S = 1.0  # how long one /ping answer stands for TorchServe's health
PING_TIMEOUT_S = 5


class TorchServeHealth:
    """TorchServe's /ping (200 once every model has its workers; with token auth on, given the key), cached."""

    def __init__(self, client: TorchServeClient, ping_url: str, headers: Callable[[], dict[str, str]] = dict,
                 ttl_s: float = HEALTH_TTL_S, clock: Callable[[], float] = time.monotonic):
        self.client, self.ping_url, self.headers = client, ping_url, headers
        self.ttl_s, self.clock = ttl_s, clock
        self._answer, self._asked_at = False, -math.inf
        self._lock: asyncio.Lock | None = None  # made in the event loop that first asks

    async def healthy(self) -> bool:
        if self._fresh():
            return self._answer
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if not self._fresh():  # nobody asked while this caller waited for the lock
                self._answer = await self._ping()
                self._asked_at = self.clock()
        return self._answer

    def _fresh(self) -> bool:
        return self.clock() - self._asked_at < self.ttl_s

    async def _ping(self) -> bool:
        try:
            response = await self.client.request("GET", self.ping_url, PING_TIMEOUT_S, self.headers())
        except UpstreamError:
            return False
        return response.status == 200
