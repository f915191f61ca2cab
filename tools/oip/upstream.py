"""The front's HTTP client to TorchServe: one aiohttp session, kept-alive connections, bodies as bytes.

Every image of every protocol request is one POST here, on the cores the model runs on, so the client's
own CPU is the protocol's cost: aiohttp (C parser and writer) spends less per request than the pure-Python
clients. The session is opened inside the server's event loop, on first use.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

import aiohttp


class UpstreamError(Exception):
    """TorchServe could not be reached, or did not answer in time."""


@dataclass(frozen=True)
class UpstreamAnswer:
    status: int
    body: bytes


class TorchServeClient:
    """No limit on connections: every image goes to TorchServe at once, whose queue and batcher decide. `tls` verifies
    an https TorchServe (the config's certificate_file: tools/tls.py); aiohttp's default otherwise."""

    def __init__(self, tls: ssl.SSLContext | None = None):
        self._session: aiohttp.ClientSession | None = None
        self.tls = tls

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=0, ssl=self.tls if self.tls is not None else True)
            self._session = aiohttp.ClientSession(connector=connector, skip_auto_headers=("User-Agent",))
        return self._session

    async def request(self, method: str, url: str, timeout_s: float, headers: dict[str, str],
                      body: bytes | None = None) -> UpstreamAnswer:
        try:
            async with self._open().request(method, url, data=body, headers=headers,
                                            timeout=aiohttp.ClientTimeout(total=timeout_s)) as response:
                return UpstreamAnswer(response.status, await response.read())
        except (aiohttp.ClientError, TimeoutError) as err:
            raise UpstreamError(f"{type(err).__name__}: {err}") from None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
