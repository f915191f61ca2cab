"""TorchServe's inference API on the engine: `POST|PUT /predictions/{model}[/{version}]` and `GET /ping`, with the
bodies, statuses and headers TorchServe 0.12 gives, so a client written for TorchServe works unchanged.

A request reaches the handler as TorchServe hands it over: one dict of named inputs, the raw body under `body`, or a
multipart form's fields under their own names, every value as the bytes received (tsvk's handler turns TorchServe's
own JSON and text decoding off; handlers/tsvk/request/json_body.py). One deliberate difference: TorchServe parses a body
sent as `application/x-www-form-urlencoded` (what `curl --data-binary @photo.jpg` sends) as a form and answers a
photo with a 500; here such a body is read as the image.

The paths are answered by an ASGI middleware in front of KServe's FastAPI app (InferenceRoutes), straight from the
connection's scope: FastAPI's routing and dependency solving, and KServe's timing middleware (which reads the
process's CPU time around every request for a log line the engine keeps quiet), cost the server 0.39 ms of CPU per
answer where it now spends 0.22 (benchmarks/results/20261128T1640Z-engine-server-cpu.md). As TorchServe does, any
method reaches `/ping` and the handler (a DELETE's empty body is the handler's to refuse), and a trailing slash is the
same path; OPTIONS, for which TorchServe describes the model's API, is refused.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from typing import Any, Callable

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from tsvk.common import RequestError
from tsvk.worker import ARRIVAL_HEADER, parse_arrival

from ...oip.bounded_body import BodyTooLarge
from ..shared.batcher import Pending, QueueFull
from .forms import read_form
from ..shared.metrics import EngineMetrics
from .pool import ModelPool
from . import wire

log = logging.getLogger("tsvk.engine")

MULTIPART = "multipart/form-data"
PING_PATH = re.compile(r"^/ping/?$")
PREDICTIONS_PATH = re.compile(r"^/predictions/(?P<model>[^/]+)(?:/(?P<version>[^/]+))?/?$")
JSON_TYPE = "application/json"
# TorchServe 0.12's headers on every inference answer, as a real one sends them (tests/integration/test_engine_kserve.py).
NO_CACHE_HEADERS = {"Cache-Control": "no-cache; no-store, must-revalidate, private", "Expires": "Thu, 01 Jan 1970 00:00:00 UTC",
                    "Pragma": "no-cache"}
REQUEST_ID_HEADER = "x-request-id"


def torchserve_error(status: int, kind: str, message: str) -> Response:
    """TorchServe's own error body (its ErrorResponse: code, type, message), written as its frontend writes it."""
    return answer(status, json.dumps({"code": status, "type": kind, "message": message}, indent=2).encode() + b"\n", JSON_TYPE)


def tsvk_error(error: RequestError) -> Response:
    """A refusal of the engine's own in tsvk's error shape (code, type, error, source, message), as the handler writes."""
    return answer(error.status, json.dumps(error.body()).encode(), JSON_TYPE)


def answer(status: int, body: bytes, content_type: str | None = None) -> Response:
    """A handler's answer goes without a content type, as TorchServe sends one whose handler sets none."""
    return Response(body, status_code=status, media_type=content_type,
                    headers={**NO_CACHE_HEADERS, REQUEST_ID_HEADER: str(uuid.uuid4())})


class PredictionsApi:
    """The inference API's routes over the engine's model pools."""

    def __init__(self, pools: dict[str, ModelPool], healthy: Callable[[], bool], max_form_part_bytes: int,
                 metrics: EngineMetrics | None = None):
        self.pools = pools
        self.metrics = metrics or EngineMetrics()
        self.healthy = healthy
        self.max_form_part_bytes = max_form_part_bytes

    async def route(self, scope, receive) -> Response | None:
        """The answer to an HTTP request on one of the inference paths; None for any other path."""
        path = scope["path"]
        if PING_PATH.match(path):
            return self.ping()
        found = PREDICTIONS_PATH.match(path)
        if found is None:
            return None
        if scope["method"] == "OPTIONS":
            return torchserve_error(405, "MethodNotAllowedException", "OPTIONS (the model's API description) is not served by this engine")
        return await self.predict(Request(scope, receive), found["model"], found["version"])

    def ping(self) -> Response:
        if self.healthy():
            return answer(200, b'{\n  "status": "Healthy"\n}\n', JSON_TYPE)
        return answer(500, b'{\n  "status": "Unhealthy"\n}\n', JSON_TYPE)

    async def predict(self, request: Request, model: str, version: str | None) -> Response:
        response = await self._answer(request, model, version)
        self.metrics.answered(response.status_code)
        return response

    async def _answer(self, request: Request, model: str, version: str | None) -> Response:
        pool = self.pools.get(model)
        if pool is None:
            return torchserve_error(404, "ModelNotFoundException", f"Model not found: {model}")
        if version is not None and version != pool.model.version:
            return torchserve_error(404, "ModelVersionNotFoundException", f"Model version: {version} does not exist for model: {model}")
        if pool.ready_workers <= 0:
            return torchserve_error(
                503,
                "ServiceUnavailableException",
                f'Model "{model}" has no worker to serve inference request. Please use scale workers API to add workers.',
            )
        try:
            with pool.batcher.place():  # a full queue refuses before the body is read: no more bodies buffered than it holds
                inputs = await self._inputs(request)
                pending = pool.batcher.submit(Pending(inputs, parse_arrival(request.headers.get(ARRIVAL_HEADER))), placed=True)
        except QueueFull:
            return _queue_full(model)
        except RequestError as err:
            return tsvk_error(err)
        self.metrics.accepted(model, version)
        status, body = await pending.answer
        return answer(status, body)

    async def _inputs(self, request: Request) -> dict[str, Any]:
        """The handler's view of the request: the raw body, or a multipart form's fields (bytes each); BadRequest
        for a form that cannot be read."""
        if request.headers.get("content-type", "").lower().startswith(MULTIPART):
            return await read_form(request, self.max_form_part_bytes)
        return {"body": await _raw_body(request)}


async def _raw_body(request: Request) -> bytes | wire.Body:
    """The body as the socket delivered it: its one piece, or its pieces unjoined (the worker receives them as one)."""
    pieces = [piece async for piece in request.stream() if piece]
    if len(pieces) == 1:
        return pieces[0]
    return wire.Body(pieces) if pieces else b""


class InferenceRoutes:
    """ASGI middleware: TorchServe's inference paths answered by `api`, every other path passed on to `app`. A failure
    of the engine's own while answering is logged and answered as TorchServe answers one (500, its error body)."""

    def __init__(self, app, api: PredictionsApi):
        self.app = app
        self.api = api

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        try:
            response = await self.api.route(scope, receive)
        except ClientDisconnect:  # the client left before its body was read: there is no one to answer
            return None
        except BodyTooLarge:  # the guard in front answers it 413 (tools/oip/server.py)
            raise
        except Exception:  # noqa: BLE001 - one request's failure: said in the log and to its client, the server goes on
            log.exception("answering %s %s", scope["method"], scope["path"])
            response = torchserve_error(500, "InternalServerException", "the engine failed to answer this request; see its log")
        if response is None:
            return await self.app(scope, receive, send)
        return await response(scope, receive, send)


def _queue_full(model: str) -> Response:
    """TorchServe's answer when the model's queue (job_queue_size) is full."""
    return torchserve_error(
        503,
        "ServiceUnavailableException",
        f'Model "{model}" has no worker to serve inference request. Please use scale workers API to add workers.',
    )


