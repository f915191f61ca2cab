"""The KServe model the front registers for each tsvk model: check a request, send each image to TorchServe.

Each image (or row of preprocessed pixels) of a request goes to TorchServe's /predictions as a request of
its own, all at once, so TorchServe's batcher batches them with each other and with every other client's;
the answers are put back together in order. An encoded image travels as it came: raw bytes (gRPC, binary
REST) or decoded from the client's base64 text (JSON REST), and the handler reads it like any /predictions
body: the front never re-encodes an image and the handler never parses a tensor document for it. Pixels travel as a
single-image protocol request (JSON), which the handler checks against the archive's crop.

A request whose images all succeed gets `probabilities` and `labels` of shape [N, k]; one that has a failed
image gets that image's status and error (which image, and the handler's code, e.g.
`bad_image: image 2 of 3: ...`). The client's `Authorization` header travels with every image, so
TorchServe's token authorization decides, exactly as for /predictions.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import struct
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
from grpc import StatusCode
from grpc_interceptor.exceptions import GrpcException
from kserve import Model
from kserve.errors import InvalidInput
from kserve.protocol.infer_type import InferInput, InferOutput, InferRequest, InferResponse

from tsvk.common import ERROR_SOURCE, RequestError
from tsvk.request import oip
from tsvk.worker import ARRIVAL_HEADER

from ..keys import is_key_refusal
from .config import ModelTensors
from .health import TorchServeHealth
from .upstream import TorchServeClient, UpstreamAnswer, UpstreamError

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
class Answer:
    status: int
    body: Any  # the handler's answer: {label: probability} for an image, a protocol response for pixels


class ImagesModel(Model):
    """One tsvk classifier on the protocol: the request's images (or rows of pixels) checked and split into one
    /predictions body each, `send` to whatever answers them, and the answers joined into the protocol's response.
    TorchServeModel sends them to TorchServe over HTTP; the engine's model hands them to its batcher."""

    def __init__(self, tensors: ModelTensors, max_images: int):
        super().__init__(tensors.name)
        self.tensors = tensors
        self.max_images = max_images
        self.ready = True

    async def send(self, item: tuple[bytes, str], headers: dict[str, str]) -> Answer:
        """The answer to one /predictions body (and its content type), with the headers forwarded to it."""
        raise NotImplementedError

    def get_input_types(self) -> list[dict]:
        return self.tensors.inputs()

    def get_output_types(self) -> list[dict]:
        return self.tensors.outputs()

    async def predict(self, payload: InferRequest, headers: dict[str, str] | None = None,
                      response_headers: dict[str, str] | None = None) -> InferResponse:
        tensor = self._the_input(payload)
        items = self._items(tensor)
        forwarded = {name: value for name, value in (headers or {}).items() if name.lower() in FORWARDED_HEADERS}
        answers = await asyncio.gather(*(self.send(item, forwarded) for item in items))
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

    def _items(self, tensor: InferInput) -> list[tuple[bytes, str]]:
        """One /predictions body per image, with its content type: the encoded image as it came, or one row of
        pixels as a single-image protocol request."""
        try:
            values = tensor.as_numpy()
        except (ValueError, TypeError, struct.error) as err:  # struct: a BYTES element's length prefix past the data
            raise InvalidInput(f"bad_tensor: input {tensor.name!r} data does not match its shape {tensor.shape}: {err}") from None
        if tensor.name == oip.IMAGES:
            return [(_image_bytes(value), "application/octet-stream") for value in values.reshape(-1)]
        crop = self.tensors.crop
        return [(orjson.dumps({"inputs": [{"name": oip.PIXELS, "datatype": "FP32", "shape": [1, 3, crop, crop], "data": row.reshape(-1)}]},
                              option=orjson.OPT_SERIALIZE_NUMPY), "application/json") for row in values]

    def _response(self, answers: list[Answer], payload: InferRequest) -> InferResponse:
        rows = [_top_k(answer.body) for answer in answers]
        probabilities = np.array([[p for _, p in row] for row in rows], dtype=np.float32)
        labels = np.array([[label.encode() for label, _ in row] for row in rows], dtype=np.object_)
        outputs = []
        for name, datatype, values in ((oip.PROBABILITIES, "FP32", probabilities), (oip.LABELS, "BYTES", labels)):
            output = InferOutput(name=name, shape=list(values.shape), datatype=datatype)
            output.set_data_from_numpy(values, binary_data=False)
            outputs.append(output)
        response_id = payload.id or str(uuid.uuid4())  # optional in a request, a string in every response
        return InferResponse(response_id=response_id, model_name=self.name, infer_outputs=outputs,
                             use_binary_outputs=payload.use_binary_outputs, requested_outputs=payload.request_outputs)


class TorchServeModel(ImagesModel):
    """One tsvk model behind the front; ready while TorchServe says it can serve (its /ping)."""

    def __init__(self, tensors: ModelTensors, torchserve_url: str, max_images: int, client: TorchServeClient,
                 health: TorchServeHealth):
        super().__init__(tensors, max_images)
        self.url = f"{torchserve_url}/predictions/{tensors.name}"
        self.client = client
        self.health = health

    async def healthy(self) -> bool:
        return await self.health.healthy()

    async def send(self, item: tuple[bytes, str], headers: dict[str, str]) -> Answer:
        body, content_type = item
        try:
            response = await self.client.request("POST", self.url, self.tensors.timeout_s,
                                                 {"Content-Type": content_type, **headers}, body)
        except UpstreamError as err:
            return Answer(503, {"error": f"torchserve_unreachable: {err}"})
        return Answer(response.status, _json_or_text(response))


def _image_bytes(value: Any) -> bytes:
    """Raw bytes (gRPC, binary REST) as they are; text from JSON (the client's base64) decoded here, where it
    costs the least (the handler would search the body for other forms first). Text that is not plain
    base64 goes as it is: the handler reads the other forms it accepts (URL-safe, wrapped) or says why not."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    text = str(value).encode("utf-8")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return text


def _top_k(body: Any) -> list[tuple[str, float]]:
    """(label, probability) pairs, highest first: the handler's {label: probability}, or its protocol response."""
    if isinstance(body, dict) and isinstance(body.get("outputs"), list):
        return list(zip(_output(body, oip.LABELS), _output(body, oip.PROBABILITIES)))
    return list(body.items())


def _json_or_text(response: UpstreamAnswer) -> dict:
    try:
        body = orjson.loads(response.body)
    except orjson.JSONDecodeError:
        return {"error": response.body.decode("utf-8", errors="replace").strip() or f"HTTP {response.status}"}
    if isinstance(body, list) and len(body) == 1:  # TorchServe's answer to a single-item batch request
        body = body[0]
    return body if isinstance(body, dict) else {"error": str(body)}


def _output(body: dict, name: str) -> list:
    return next(output["data"] for output in body["outputs"] if output["name"] == name)


def _raise_first_failure(answers: list[Answer]) -> None:
    """The first failed image's status, with which image it was and why (the handler's code, or TorchServe's type)."""
    failed = next(((i, a) for i, a in enumerate(answers) if a.status != 200), None)
    if failed is None:
        return
    index, answer = failed
    status = 401 if is_key_refusal(answer.status, str(answer.body)) else answer.status  # TorchServe says 400
    where = f"image {index + 1} of {len(answers)}: " if len(answers) > 1 else ""
    raise ForwardedError(status, _error_text(answer, where))


def _error_text(answer: Answer, where: str) -> str:
    """The handler writes its code and message; TorchServe's own refusals carry `type` and `message`."""
    body = answer.body
    if body.get("source") == ERROR_SOURCE:  # the handler's /predictions error
        return f"{body.get('error')}: {where}{body.get('message', '')}"
    if "error" in body and "type" not in body:  # the handler's protocol error, `code: message`, or the front's own
        code, _, message = str(body["error"]).partition(": ")
        return f"{code}: {where}{message}" if message else f"{where}{code}"
    if "type" in body:
        return f"torchserve: {where}{body.get('type')}: {body.get('message', '')}"
    return f"{where}HTTP {answer.status}: {body}"
