"""TorchServe's inference API on the engine: `POST|PUT /predictions/{model}[/{version}]` and `GET /ping`, with the
bodies, statuses and headers TorchServe 0.12 gives, so a client written for TorchServe works unchanged.

A request reaches the handler as TorchServe hands it over: one dict of named inputs, the raw body under `body`, or a
multipart form's fields under their own names, every value as the bytes received (tsvk's handler turns TorchServe's
own JSON and text decoding off; handlers/tsvk/request/json_body.py). One deliberate difference: TorchServe parses a body
sent as `application/x-www-form-urlencoded` (what `curl --data-binary @photo.jpg` sends) as a form and answers a
photo with a 500; here such a body is read as the image.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Callable

from starlette.requests import Request
from starlette.responses import Response

from tsvk.worker import ARRIVAL_HEADER, parse_arrival

from .batcher import Pending, QueueFull
from .metrics import EngineMetrics
from .pool import ModelPool

MULTIPART = "multipart/form-data"
PREDICTION_METHODS = ["GET", "POST", "PUT"]  # TorchServe hands a GET's (empty) body to the handler too
JSON_TYPE = "application/json"
# TorchServe 0.12's headers on every inference answer, as a real one sends them (tests/integration/test_engine_kserve.py).
NO_CACHE_HEADERS = {"Cache-Control": "no-cache; no-store, must-revalidate, private", "Expires": "Thu, 01 Jan 1970 00:00:00 UTC",
                    "Pragma": "no-cache"}
REQUEST_ID_HEADER = "x-request-id"


def torchserve_error(status: int, kind: str, message: str) -> Response:
    """TorchServe's own error body (its ErrorResponse: code, type, message), written as its frontend writes it."""
    return answer(status, json.dumps({"code": status, "type": kind, "message": message}, indent=2).encode() + b"\n", JSON_TYPE)


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

    def register(self, app) -> None:
        app.add_api_route("/ping", self.ping, methods=["GET"])
        app.add_api_route("/predictions/{model}", self.predict, methods=PREDICTION_METHODS)
        app.add_api_route("/predictions/{model}/{version}", self.predict_version, methods=PREDICTION_METHODS)

    async def ping(self) -> Response:
        if self.healthy():
            return answer(200, b'{\n  "status": "Healthy"\n}\n', JSON_TYPE)
        return answer(500, b'{\n  "status": "Unhealthy"\n}\n', JSON_TYPE)

    async def predict(self, request: Request, model: str) -> Response:
        return await self._predict(request, model, None)

    async def predict_version(self, request: Request, model: str, version: str) -> Response:
        return await self._predict(request, model, version)

    async def _predict(self, request: Request, model: str, version: str | None) -> Response:
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
        if pool.batcher.full():  # refused before its body is read: under a burst the refusals stay fast
            return _queue_full(model)
        inputs = await self._inputs(request)
        try:
            pending = pool.batcher.submit(Pending(inputs, parse_arrival(request.headers.get(ARRIVAL_HEADER))))
        except QueueFull:
            return _queue_full(model)
        self.metrics.accepted(model, version)
        status, body = await pending.answer
        return answer(status, body)

    async def _inputs(self, request: Request) -> dict[str, Any]:
        """The handler's view of the request: the raw body, or a multipart form's fields (bytes each)."""
        if request.headers.get("content-type", "").lower().startswith(MULTIPART):
            form = await request.form(max_files=64, max_fields=64, max_part_size=self.max_form_part_bytes)
            return {name: await _bytes(value) for name, value in form.multi_items()}
        return {"body": await request.body()}


def _queue_full(model: str) -> Response:
    """TorchServe's answer when the model's queue (job_queue_size) is full."""
    return torchserve_error(
        503,
        "ServiceUnavailableException",
        f'Model "{model}" has no worker to serve inference request. Please use scale workers API to add workers.',
    )


async def _bytes(value: Any) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    return await value.read()
