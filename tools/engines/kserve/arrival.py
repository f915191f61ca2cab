"""When a request arrived, as the deadline check reads it (`X-Request-Start`): a trusted proxy's stamp, else the
engine's own clock.

A load balancer stamps `X-Request-Start` as a request reaches it, so the time it waited there counts against the
model's deadline (`tsvk config --deadline-ms`). A client may send any stamp: one in the future is never shed, one in
the past is shed unread. So the engine keeps the header only from the peers that `tsvk.trusted_proxies` names
(addresses or networks, comma-separated; none by default) and otherwise stamps the request itself as it reaches the
engine: its deadline then counts the time it waits in the engine's queue. REST requests are stamped by the ASGI layer
here, in front of every path; gRPC calls by grpc_guards.py's interceptor, the call's peer judged as a REST client's.
"""

from __future__ import annotations

import ipaddress
import time
from typing import Iterable

from tsvk.worker import ARRIVAL_HEADER

TRUSTED_PROXIES_KEY = "tsvk.trusted_proxies"  # config.properties: the peers whose X-Request-Start is believed
_HEADER = ARRIVAL_HEADER.lower().encode()  # ASGI header names are lower case bytes; gRPC metadata keys lower case text


def trusted_networks(properties: dict[str, str]) -> tuple:
    """The config's trusted proxies as networks (an address is a network of one); ValueError names a bad entry."""
    networks = []
    for entry in (part.strip() for part in properties.get(TRUSTED_PROXIES_KEY, "").split(",")):
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise ValueError(f"{TRUSTED_PROXIES_KEY} must list IP addresses or networks (10.0.0.0/8), comma-separated; "
                             f"got {entry!r}") from None
    return tuple(networks)


def trusts(networks: Iterable, host: str | None) -> bool:
    """Whether a peer at `host` is one of the trusted proxies (a peer that is no IP address never is)."""
    try:
        address = ipaddress.ip_address(host or "")
    except ValueError:
        return False
    return any(address in network for network in networks)


def header_kept(given: bool, networks: Iterable, host: str | None) -> bool:
    """Whether a request's own X-Request-Start stands: it has one, and its peer is a trusted proxy."""
    return given and trusts(networks, host)


def stamp() -> str:
    """The engine's own arrival stamp, in the form load balancers write (`t=<unix seconds>`)."""
    return f"t={time.time():.6f}"


class ArrivalStamp:
    """ASGI middleware: an HTTP request keeps its `X-Request-Start` only from a trusted proxy; any other is stamped."""

    def __init__(self, app, networks: tuple):
        self.app = app
        self.networks = networks

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            scope = self.stamped(scope)
        return await self.app(scope, receive, send)

    def stamped(self, scope: dict) -> dict:
        headers = list(scope.get("headers") or [])
        client = scope.get("client")
        if header_kept(any(name == _HEADER for name, _ in headers), self.networks, client[0] if client else None):
            return scope
        kept = [(name, value) for name, value in headers if name != _HEADER]
        return {**scope, "headers": [*kept, (_HEADER, stamp().encode())]}
