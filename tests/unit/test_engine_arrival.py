"""The engine's arrival stamp: a request's X-Request-Start stands only from a trusted proxy; any other is stamped on
arrival. The ASGI layer runs on real scopes; the gRPC context here is a stand-in with the two methods KServe's servicer
and the interceptor call (grpc.aio.ServicerContext's invocation_metadata() and peer(), grpcio 1.7x)."""

from __future__ import annotations

import asyncio
import time

import pytest

from tsvk.worker import parse_arrival
from tsvk_tools.engines.kserve.arrival import ArrivalStamp, trusted_networks, trusts
from tsvk_tools.engines.kserve.grpc_guards import _peer_host, _StampedContext

OLD = b"t=1000000000.0"  # 2001: shed by any deadline if it were believed


def test_trusted_proxies_are_addresses_or_networks_and_anything_else_is_named():
    networks = trusted_networks({"tsvk.trusted_proxies": " 10.0.0.0/8, 127.0.0.1 ,::1,"})
    assert trusts(networks, "10.1.2.3") and trusts(networks, "127.0.0.1") and trusts(networks, "::1")
    assert not trusts(networks, "192.168.0.1") and not trusts(networks, None) and not trusts(networks, "unix-socket")
    assert trusted_networks({}) == ()
    with pytest.raises(ValueError, match="tsvk.trusted_proxies must list IP addresses or networks .* got 'proxy.local'"):
        trusted_networks({"tsvk.trusted_proxies": "10.0.0.0/8,proxy.local"})


def _seen_headers(networks: tuple, client: tuple | None, headers: list) -> dict:
    seen = {}

    async def app(scope, receive, send):
        seen.update(scope["headers"])

    scope = {"type": "http", "client": client, "headers": headers}
    asyncio.run(ArrivalStamp(app, networks)(scope, None, None))
    return seen


@pytest.mark.parametrize("client, headers, believed", [
    (("127.0.0.1", 5000), [(b"x-request-start", OLD)], False),  # a client: its stamp is replaced
    (("10.0.0.7", 5000), [(b"x-request-start", OLD)], True),  # the trusted proxy: its stamp stands
    (("10.0.0.7", 5000), [], False),  # the proxy sent none: stamped here
    (None, [(b"x-request-start", OLD)], False),  # no peer address (a Unix socket): never trusted
])
def test_an_http_request_keeps_its_stamp_only_from_a_trusted_proxy(client, headers, believed):
    seen = _seen_headers(trusted_networks({"tsvk.trusted_proxies": "10.0.0.0/8"}), client, [(b"host", b"x"), *headers])
    assert seen[b"host"] == b"x"
    if believed:
        assert seen[b"x-request-start"] == OLD
    else:
        assert abs(parse_arrival(seen[b"x-request-start"]) - time.time()) < 5


class _Context:
    def __init__(self, peer: str, metadata: tuple):
        self._peer, self._metadata = peer, metadata

    def peer(self) -> str:
        return self._peer

    def invocation_metadata(self) -> tuple:
        return self._metadata

    def code(self) -> str:
        return "the call's own"


def test_a_grpc_call_keeps_its_stamp_only_from_a_trusted_proxy():
    networks = trusted_networks({"tsvk.trusted_proxies": "10.0.0.0/8,::1"})
    metadata = (("authorization", "Bearer k"), ("x-request-start", OLD.decode()))
    trusted = _StampedContext(_Context("ipv4:10.0.0.7:5000", metadata), networks)
    assert trusted.invocation_metadata() == metadata and trusted.code() == "the call's own"
    assert _StampedContext(_Context("ipv6:[::1]:5000", metadata), networks).invocation_metadata() == metadata
    stamped = dict(_StampedContext(_Context("ipv4:127.0.0.1:5000", metadata), networks).invocation_metadata())
    assert stamped["authorization"] == "Bearer k" and abs(parse_arrival(stamped["x-request-start"]) - time.time()) < 5


def test_grpc_peers_are_read_as_grpc_writes_them():
    assert _peer_host("ipv4:127.0.0.1:5000") == "127.0.0.1"
    assert _peer_host("ipv6:[::1]:5000") == "::1"
    assert _peer_host("unix:/tmp/socket") is None and _peer_host(None) is None
