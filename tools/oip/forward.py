"""The KServe model the front registers for each tsvk model: check a request, send each image to TorchServe.

Each image (or row of preprocessed pixels) of a request goes to TorchServe as an Open Inference
Protocol request of its own, all at once, so TorchServe's batcher batches them with each other and
with every other client's; the answers are put back together in order. A request whose images all
succeed gets `probabilities` and `labels` of shape [N, k]; one that has a failed image gets that
image's status and error (which image, and the handler's code, e.g. `bad_image: image 2 of 3: ...`).

The client's `Authorization` header travels with every image, so TorchServe's token authorization
decides, exactly as for /predictions.
"""

from __future__ import annotations

import asyncio
import base64
import uuid
from dataclasses import dataclass
from typing import Any, Callable

import httpx
import numpy as np
import orjson
from grpc import StatusCode
from grpc_interceptor.exceptions import GrpcException
from kserve import Model
from kserve.errors import InvalidInput
from kserve.protocol.infer_type import InferInput, InferOutput, InferRequest, InferResponse

from tsvk import oip
from tsvk.deadline import ARRIVAL_HEADER
from tsvk.errors import RequestError

from ..keys import is_key_refusal
from .config import ModelTensors

FORWARDED_HEADERS = ("authorization", ARRIVAL_HEADER.lower())  # token auth and the deadline's arrival time
_GRPC_CODES = {400: StatusCode.INVALID_ARGUMENT, 401: StatusCode.UNAUTHENTICATED, 403: StatusCode.PERMISSION_DENIED,
               404: StatusCode.NOT_FOUND, 408: StatusCode.DEADLINE_EXCEEDED, 413: StatusCode.INVALID_ARGUMENT,
               415: StatusCode.INVALID_ARGUMENT, 429: StatusCode.RESOURCE_EXHAUSTED, 503: StatusCode.UNAVAILABLE,
               504: StatusCode.DEADLINE_EXCEEDED, 507: StatusCode.UNAVAILABLE}


class ForwardedError(GrpcException):
    """A failure with its own HTTP status and gRPC code: REST answers `status` with {"error": ...} (server.py),
    gRPC aborts with the matching code (KServe's interceptor passes GrpcException codes through)."""

    def __init__(self, status: int, message: str):
        super().__init__(details=message, status_code=_GRPC_CODES.get(status, StatusCode.INTERNAL))
        self.status = status
        self.message = message

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class _Answer:
    status: int
    body: dict


class TorchServeModel(Model):
    """One tsvk model behind the front; ready while TorchServe says it can serve (its /ping)."""

    def __init__(self, tensors: ModelTensors, torchserve_url: str, max_images: int, client: httpx.AsyncClient,
                 ping_headers: Callable[[], dict[str, str]] = dict):
        super().__init__(tensors.name)
        self.tensors = tensors
        self.url = f"{torchserve_url}/predictions/{tensors.name}"
        self.ping_url = f"{torchserve_url}/ping"
        self.max_images = max_images
        self.client = client
        self.ping_headers = ping_headers
        self.ready = True

    async def healthy(self) -> bool:
        return await torchserve_healthy(self.client, self.ping_url, self.ping_headers())

    def get_input_types(self) -> list[dict]:
        return self.tensors.inputs()

    def get_output_types(self) -> list[dict]:
        return self.tensors.outputs()

    async def predict(self, payload: InferRequest, headers: dict[str, str] | None = None,
                      response_headers: dict[str, str] | None = None) -> InferResponse:
        tensor = self._the_input(payload)
        items = self._items(tensor)
        forwarded = {name: value for name, value in (headers or {}).items() if name.lower() in FORWARDED_HEADERS}
        answers = await asyncio.gather(*(self._send(item, payload.id, forwarded) for item in items))
        _raise_first_failure(answers)
        return self._response(answers, payload)

    def _the_input(self, payload: InferRequest) -> InferInput:
        if len(payload.inputs) != 1:
            raise InvalidInput(f"bad_tensor: send exactly one input, {oip.IMAGES!r} (BYTES) or {oip.PIXELS!r} (FP32); "
                               f"got {len(payload.inputs)}")
        tensor = payload.inputs[0]
        try:
            oip.check_input(tensor.name, tensor.datatype, tensor.shape, self.tensors.crop, self.max_images)
        except RequestError as err:
            raise InvalidInput(f"{err.code}: {err.message}") from None
        return tensor

    def _items(self, tensor: InferInput) -> list[dict]:
        """One single-image OIP input per image: base64 text for encoded images, flat FP32 rows for pixels."""
        try:
            values = tensor.as_numpy()
        except (ValueError, TypeError) as err:
            raise InvalidInput(f"bad_tensor: input {tensor.name!r} data does not match its shape {tensor.shape}: {err}") from None
        if tensor.name == oip.IMAGES:
            return [{"name": oip.IMAGES, "datatype": "BYTES", "shape": [1], "data": [_as_text(v)]} for v in values.reshape(-1)]
        crop = self.tensors.crop
        return [{"name": oip.PIXELS, "datatype": "FP32", "shape": [1, 3, crop, crop], "data": row.reshape(-1)} for row in values]

    async def _send(self, item: dict, request_id: str | None, headers: dict[str, str]) -> _Answer:
        document = {"inputs": [item]} | ({"id": request_id} if request_id else {})
        body = orjson.dumps(document, option=orjson.OPT_SERIALIZE_NUMPY)
        try:
            response = await self.client.post(self.url, content=body, timeout=self.tensors.timeout_s,
                                              headers={"Content-Type": "application/json", **headers})
        except httpx.HTTPError as err:
            return _Answer(503, {"error": f"torchserve_unreachable: {type(err).__name__}: {err}"})
        return _Answer(response.status_code, _json_or_text(response))

    def _response(self, answers: list[_Answer], payload: InferRequest) -> InferResponse:
        probabilities = np.array([_output(a.body, oip.PROBABILITIES) for a in answers], dtype=np.float32)
        labels = np.array([[label.encode() for label in _output(a.body, oip.LABELS)] for a in answers], dtype=np.object_)
        outputs = []
        for name, datatype, values in ((oip.PROBABILITIES, "FP32", probabilities), (oip.LABELS, "BYTES", labels)):
            output = InferOutput(name=name, shape=list(values.shape), datatype=datatype)
            output.set_data_from_numpy(values, binary_data=False)
            outputs.append(output)
        response_id = payload.id or str(uuid.uuid4())  # optional in a request, a string in every response
        return InferResponse(response_id=response_id, model_name=self.name, infer_outputs=outputs,
                             use_binary_outputs=payload.use_binary_outputs, requested_outputs=payload.request_outputs)


async def torchserve_healthy(client: httpx.AsyncClient, ping_url: str, headers: dict[str, str]) -> bool:
    """TorchServe's /ping answers 200 Healthy once every model has its workers (with token auth on, given the key)."""
    try:
        response = await client.get(ping_url, timeout=5, headers=headers)
    except httpx.HTTPError:
        return False
    return response.status_code == 200


def _as_text(value: Any) -> str:
    """Raw bytes (gRPC, binary REST) travel as base64; text from JSON is already the client's base64."""
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    return str(value)


def _json_or_text(response: httpx.Response) -> dict:
    try:
        body = response.json()
    except ValueError:
        return {"error": response.text.strip() or f"HTTP {response.status_code}"}
    return body if isinstance(body, dict) else {"error": str(body)}


def _output(body: dict, name: str) -> list:
    return next(output["data"] for output in body["outputs"] if output["name"] == name)


def _raise_first_failure(answers: list[_Answer]) -> None:
    """The first failed image's status, with which image it was and why (the handler's code, or TorchServe's type)."""
    failed = next(((i, a) for i, a in enumerate(answers) if a.status != 200), None)
    if failed is None:
        return
    index, answer = failed
    status = 401 if is_key_refusal(answer.status, str(answer.body)) else answer.status  # TorchServe says 400
    where = f"image {index + 1} of {len(answers)}: " if len(answers) > 1 else ""
    raise ForwardedError(status, _error_text(answer, where))


def _error_text(answer: _Answer, where: str) -> str:
    """The handler writes `code: message`; TorchServe's own refusals carry `type` and `message`."""
    body = answer.body
    if "error" in body and "type" not in body:
        code, _, message = str(body["error"]).partition(": ")
        return f"{code}: {where}{message}" if message else f"{where}{code}"
    if "type" in body:
        return f"torchserve: {where}{body.get('type')}: {body.get('message', '')}"
    return f"{where}HTTP {answer.status}: {body}"
