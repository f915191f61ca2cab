"""Find the image bytes in one TorchServe request, however the client sent them.

TorchServe hands the handler one dict per request: a raw body under "data" or "body", multipart
form fields under their own names, JSON bodies already parsed into dicts, text bodies as str.
Clients also send base64 (as text, as bytes, or inside JSON under "image", "data" or "b64").

A JSON body with `inputs` is an Open Inference Protocol request (handlers/tsvk/oip.py): one image, as
base64 text in a BYTES tensor, or one preprocessed FP32 image. `read_request` says which protocol a
request spoke, so its answer (or its error) is written in the same one (postprocess.py).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from . import oip
from .errors import BadImage, BadRequest, BadTensor, RequestError
from .json_body import JsonLimits, limits_for_pixels, looks_like_json, parse_json

PREDICTIONS = "predictions"  # TorchServe's /predictions shapes: an image in, {label: probability} out
OIP = "oip"  # the Open Inference Protocol: tensors in, tensors out
BODY_KEYS = ("data", "body")
JSON_IMAGE_KEYS = ("image", "data", "b64")

# Leading bytes of the formats we decode; anything else is tried as base64 before giving up.
_MAGIC = (b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n", b"GIF87a", b"GIF89a", b"BM")


@dataclass(frozen=True)
class Payload:
    """What one request holds: an encoded image, preprocessed pixels (3, H, W), or why it cannot be read;
    and the protocol its answer is written in."""

    protocol: str = PREDICTIONS
    image: bytes | None = None
    pixels: np.ndarray | None = None
    error: RequestError | None = None
    request_id: str | None = None
    request: Any = None  # the request with its JSON body parsed: where the task reads its options


def read_request(request: Any, crop: int, parameters: tuple[str, ...] = ()) -> Payload:
    """The payload of one request; never raises: a request that cannot be read, whatever the reason,
    carries its error, so it fails alone and the rest of its batch is answered.

    `parameters` are the task's answer options (form fields) that may arrive beside the image."""
    try:
        request = request if isinstance(request, Mapping) else {"body": request}  # a bare body, as tools pass one
        request = parsed_json_body(request, limits_for_pixels(oip.element_count((3, crop, crop))))
        document = _oip_document(request)
        if document is not None:
            return _read_oip(document, crop)
        return Payload(image=request_payload(request, parameters), request=request)
    except RequestError as err:
        return Payload(error=err.detached())
    except Exception as err:  # noqa: BLE001 - whatever a request holds (RecursionError, TypeError...), it fails alone
        return Payload(error=unreadable(err))


def parsed_json_body(request: Mapping[str, Any], limits: JsonLimits = JsonLimits()) -> Mapping[str, Any]:
    """The request with a JSON body parsed within `limits` (json_body.py): TorchServe hands JSON on as the bytes
    it received once the handler has turned its own parsing off, and tests and tools may pass text."""
    key = next((key for key in BODY_KEYS if request.get(key) is not None), None)
    if key is None or not looks_like_json(request[key]):
        return request
    return {**request, key: parse_json(request[key], limits)}


def unreadable(err: Exception) -> BadRequest:
    """A 400 for a request that made reading it fail in a way no check foresaw, naming what happened."""
    return BadRequest(f"cannot read the request: {type(err).__name__}: {str(err)[:200]}")


def request_payload(request: Any, parameters: tuple[str, ...] = ()) -> bytes:
    """The encoded image of one request, or BadRequest saying what was found instead.

    `parameters` are the names of answer options (form fields) that arrive beside the image in the
    same dict: never taken for the image."""
    if isinstance(request, Mapping) and parameters:
        request = {key: value for key, value in request.items() if key not in parameters}
    value = _pick_field(request) if isinstance(request, Mapping) else request
    return _to_image_bytes(value)


def looks_like_image(data: bytes) -> bool:
    return data.startswith(_MAGIC) or (data[:4] == b"RIFF" and data[8:12] == b"WEBP")


def _pick_field(request: Mapping[str, Any]) -> Any:
    for key in BODY_KEYS:
        if request.get(key) is not None:
            return request[key]
    fields = [value for value in request.values() if value is not None]
    if not fields:
        raise BadRequest("request has no body; send the image bytes, base64 text, or a form field")
    files = [value for value in fields if isinstance(value, (bytes, bytearray))]  # a file beats a text field
    return (files or fields)[0]


def _to_image_bytes(value: Any) -> bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _from_bytes(bytes(value))
    if isinstance(value, str):
        return _from_text(value)
    if isinstance(value, Mapping):
        return _from_json(value)
    raise BadRequest(f"request body must be image bytes, base64 text or a JSON object, got {type(value).__name__}")


def _from_bytes(data: bytes) -> bytes:
    if not data:
        raise BadImage("request body is empty")
    if looks_like_image(data):
        return data
    stripped = data.lstrip()
    if stripped.startswith(b"{"):
        return _from_text(data.decode("utf-8", errors="replace"))
    decoded = _b64_or_none(data)
    return decoded if decoded else data  # unknown bytes: let the decoder say what is wrong


def _from_text(text: str) -> bytes:
    text = text.strip()
    if not text:
        raise BadImage("request body is empty")
    if text.startswith("{"):
        return _from_json(parse_json(text))
    if text.startswith("data:") and "," in text:  # data URL: data:image/png;base64,....
        text = text.split(",", 1)[1]
    decoded = _b64_or_none(text.encode("ascii", errors="replace"))
    if decoded is None:
        raise BadRequest("text body is not valid base64; send raw image bytes or base64 of them")
    return decoded


def _from_json(obj: Any) -> bytes:
    if not isinstance(obj, Mapping):
        raise BadRequest(f"JSON body must be an object with one of {', '.join(JSON_IMAGE_KEYS)}")
    for key in JSON_IMAGE_KEYS:
        if isinstance(obj.get(key), str):
            return _from_text(obj[key])
    raise BadRequest(
        f"JSON body must hold the base64 image under one of {', '.join(JSON_IMAGE_KEYS)}; got keys {sorted(obj)}"
    )


def _b64_or_none(data: bytes) -> bytes | None:
    compact = b"".join(data.split())
    if not compact:
        return None
    alphabet = b"-_" if (b"-" in compact or b"_" in compact) else None  # URL-safe base64
    try:
        return base64.b64decode(compact, altchars=alphabet, validate=True) or None
    except (binascii.Error, ValueError):
        return None


def _oip_document(request: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The request's JSON object when it is an Open Inference Protocol request (it has `inputs`)."""
    value = _pick_field(request)
    return value if isinstance(value, Mapping) and "inputs" in value else None


def _read_oip(document: Mapping[str, Any], crop: int) -> Payload:
    request_id = document.get("id") if isinstance(document.get("id"), str) else None
    try:
        tensor = _single_input(document.get("inputs"))
        oip.check_input(tensor.get("name"), tensor.get("datatype"), _shape(tensor), crop, max_items=1)
        if tensor["name"] == oip.IMAGES:
            return Payload(OIP, image=_oip_image(tensor.get("data")), request_id=request_id)
        return Payload(OIP, pixels=_oip_pixels(tensor.get("data"), crop), request_id=request_id)
    except RequestError as err:
        return Payload(OIP, error=err.detached(), request_id=request_id)
    except Exception as err:  # noqa: BLE001 - as read_request: this request fails alone, answered in its protocol
        return Payload(OIP, error=unreadable(err), request_id=request_id)


def _single_input(inputs: Any) -> Mapping[str, Any]:
    if not isinstance(inputs, list) or len(inputs) != 1 or not isinstance(inputs[0], Mapping):
        raise BadTensor(f"inputs must be a list of exactly one tensor, {oip.IMAGES!r} (BYTES) or {oip.PIXELS!r} (FP32)")
    return inputs[0]


def _shape(tensor: Mapping[str, Any]) -> list[int]:
    shape = tensor.get("shape")
    if not isinstance(shape, list) or not all(isinstance(d, int) for d in shape):
        raise BadTensor(f"shape must be a list of whole numbers, got {shape!r}")
    return shape


def _oip_image(data: Any) -> bytes:
    """One encoded image, sent in JSON as base64 text (as KServe's own image examples do)."""
    items = data if isinstance(data, list) else [data]
    if len(items) != 1 or not isinstance(items[0], str):
        raise BadTensor(f"{oip.IMAGES!r} data in JSON must be one base64 string per image")
    return _from_text(items[0])


def _oip_pixels(data: Any, crop: int) -> np.ndarray:
    """The flat (or nested) row-major FP32 data as one (3, crop, crop) image, finite values only."""
    try:
        pixels = np.asarray(data, dtype=np.float32).reshape(-1)
    except (TypeError, ValueError):
        raise BadTensor(f"{oip.PIXELS!r} data must be numbers") from None
    expected = oip.element_count((3, crop, crop))
    if pixels.size != expected:
        raise BadTensor(f"{oip.PIXELS!r} data holds {pixels.size} values; shape [1, 3, {crop}, {crop}] needs {expected}")
    if not np.isfinite(pixels).all():
        raise BadTensor(f"{oip.PIXELS!r} data must be finite numbers (no NaN or infinity)")
    return pixels.reshape(3, crop, crop)
