"""The engine's gRPC interceptors: the inference key on every call, and the arrival stamp the deadline reads.

With token authorization on, every gRPC call needs the inference key, as every REST path does.

KServe's servicer (kserve 0.21, kserve/protocol/grpc/servicer.py) checks no key, and the engine's model checks it in
ModelInfer only: ServerLive, ServerReady, ModelReady, ServerMetadata and ModelMetadata would answer anyone, naming the
served models and their tensors. A server interceptor (grpc.aio.ServerInterceptor, grpcio 1.7x) sees each call's
metadata before its handler runs, so one check covers every method, those KServe may add included.

KServe's servicer reads a call's `X-Request-Start` from `context.invocation_metadata()`; the arrival interceptor hands it
a context whose metadata carries the stamp the engine believes (arrival.py: a trusted proxy's, else its own clock).
"""

from __future__ import annotations

from collections import namedtuple
from typing import Callable

import grpc
from grpc import aio

from tsvk.worker import ARRIVAL_HEADER

from .arrival import header_kept, stamp
from .tokens import KEY_REFUSED

AUTHORIZATION = "authorization"  # gRPC metadata keys are lower case
# A server call's metadata items as grpcio hands them over (1.85: a namedtuple of the same name and fields in
# _cython/_cygrpc/metadata.pyx.pxi): KServe's `to_headers` reads `.key` and `.value`, others unpack them.
Metadatum = namedtuple("Metadatum", ("key", "value"))


class KeyInterceptor(aio.ServerInterceptor):
    """Calls without the key are refused UNAUTHENTICATED before their handler runs; `allows` judges the header."""

    def __init__(self, allows: Callable[[str | bytes | None], bool]):
        self.allows = allows

    async def intercept_service(self, continuation, handler_call_details):
        metadata = dict(handler_call_details.invocation_metadata or ())
        if self.allows(metadata.get(AUTHORIZATION)):
            return await continuation(handler_call_details)
        return _REFUSAL


async def _refuse(request, context) -> None:
    await context.abort(grpc.StatusCode.UNAUTHENTICATED, f"InvalidKeyException: {KEY_REFUSED}")


# Every method of the inference service is unary; the refused request's bytes are never decoded.
_REFUSAL = grpc.unary_unary_rpc_method_handler(_refuse)


class GrpcArrivalStamp(aio.ServerInterceptor):
    """The gRPC side of ArrivalStamp: the call's handler sees the engine's stamp unless its peer is a trusted proxy."""

    def __init__(self, networks: tuple):
        self.networks = networks

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler
        inner, networks = handler.unary_unary, self.networks

        async def stamped(request, context):
            return await inner(request, _StampedContext(context, networks))

        return grpc.unary_unary_rpc_method_handler(stamped, request_deserializer=handler.request_deserializer,
                                                   response_serializer=handler.response_serializer)


class _StampedContext:
    """A call's context whose metadata carries the arrival stamp the engine believes; everything else is the call's."""

    def __init__(self, context, networks: tuple):
        self._context = context
        self._networks = networks

    def invocation_metadata(self):
        metadata = tuple(Metadatum(*item) for item in self._context.invocation_metadata() or ())
        given = any(item.key == ARRIVAL_HEADER.lower() for item in metadata)
        if header_kept(given, self._networks, _peer_host(self._context.peer())):
            return metadata
        kept = (item for item in metadata if item.key != ARRIVAL_HEADER.lower())
        return (*kept, Metadatum(ARRIVAL_HEADER.lower(), stamp()))

    def __getattr__(self, name):
        return getattr(self._context, name)


def _peer_host(peer: str | None) -> str | None:
    """The address of a gRPC peer string (`ipv4:127.0.0.1:5000`, `ipv6:[::1]:5000`); None for a Unix socket."""
    kind, _, rest = (peer or "").partition(":")
    if kind == "ipv4":
        return rest.rpartition(":")[0]
    if kind == "ipv6":
        return rest.rpartition(":")[0].strip("[]")
    return None
