"""With token authorization on, every gRPC call needs the inference key, as every REST path does.

KServe's servicer (kserve 0.21, kserve/protocol/grpc/servicer.py) checks no key, and the engine's model checks it in
ModelInfer only: ServerLive, ServerReady, ModelReady, ServerMetadata and ModelMetadata would answer anyone, naming the
served models and their tensors. A server interceptor (grpc.aio.ServerInterceptor, grpcio 1.7x) sees each call's
metadata before its handler runs, so one check covers every method, those KServe may add included.
"""

from __future__ import annotations

from typing import Callable

import grpc
from grpc import aio

from .tokens import KEY_REFUSED

AUTHORIZATION = "authorization"  # gRPC metadata keys are lower case


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
