"""The Open Inference Protocol on the engine: the OIP front's KServe model (tools/oip/forward.py), its images handed
to the model's batcher instead of sent to TorchServe over HTTP.

The front's checks, splitting and answers are kept as they are: each image (or row of pixels) becomes one request
of the batcher, so it shares batches with every /predictions request, and a failed image fails the request with
its status and the handler's code. The inference key is checked here too, for gRPC (REST is checked at the door).
"""

from __future__ import annotations

from typing import Any

import orjson

from tsvk.worker import ARRIVAL_HEADER, parse_arrival

from ...oip.config import ModelTensors
from ...oip.forward import Answer, ForwardedError, ImagesModel
from ..shared.batcher import Pending, QueueFull
from .pool import ModelPool
from .tokens import KEY_REFUSED, InferenceKey


class EngineModel(ImagesModel):
    """One served classifier behind KServe's data plane; ready while its pool has a worker."""

    def __init__(self, tensors: ModelTensors, pool: ModelPool, max_images: int, key: InferenceKey | None = None):
        super().__init__(tensors, max_images)
        self.pool = pool
        self.key = key
        self.enable_latency_logging = False

    async def healthy(self) -> bool:
        return self.pool.ready_workers > 0

    async def predict(self, payload, headers: dict[str, str] | None = None, response_headers: dict[str, str] | None = None):
        if self.key is not None:
            authorization = {name.lower(): value for name, value in (headers or {}).items()}.get("authorization")
            if not self.key.allows(authorization):
                raise ForwardedError(401, f"InvalidKeyException: {KEY_REFUSED}")
        return await super().predict(payload, headers, response_headers)

    async def send(self, item: tuple[bytes, str], headers: dict[str, str]) -> Answer:
        body, _ = item
        arrival = parse_arrival({name.lower(): value for name, value in headers.items()}.get(ARRIVAL_HEADER.lower()))
        try:
            pending = self.pool.batcher.submit(Pending({"body": body}, arrival))
        except QueueFull as err:
            return Answer(503, {"error": f"queue_full: {err}"})
        self.pool.metrics.accepted(self.pool.model.name, None)
        status, answer = await pending.answer
        return Answer(status, _parsed(answer))


def _parsed(answer: bytes) -> Any:
    try:
        return orjson.loads(answer)
    except orjson.JSONDecodeError:
        return {"error": answer.decode("utf-8", errors="replace")}
