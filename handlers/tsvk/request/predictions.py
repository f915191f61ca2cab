"""TorchServe's /predictions protocol: the image bytes of one request, however the client sent them, and
the answer written as TorchServe's image_classifier writes it ({label: probability}).

TorchServe hands the handler one dict per request: a raw body under "data" or "body", multipart
form fields under their own names, JSON bodies already parsed into dicts, text bodies as str.
Clients also send base64 (as text, as bytes, or inside JSON under "image", "data" or "b64").
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, Mapping

from ..common.errors import BadImage, BadRequest, RequestError
from .json_body import JsonLimits, looks_like_json, parse_json

BODY_KEYS = ("data", "body")
JSON_IMAGE_KEYS = ("image", "data", "b64")

# Leading bytes of the formats we decode; anything else is tried as base64 before giving up.
_MAGIC = (b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n", b"GIF87a", b"GIF89a", b"BM")


def write_answer(answer: Any) -> Any:
    """The task's answer as it is: top-k {label: probability}, boxes, a label map."""
    return answer


def write_error(error: RequestError) -> dict[str, Any]:
    """TorchServe's error shape plus our machine-readable code."""
    return error.body()


def parsed_json_body(request: Mapping[str, Any], limits: JsonLimits = JsonLimits()) -> Mapping[str, Any]:
    """The request with a JSON body parsed within `limits` (json_body.py): TorchServe hands JSON on as the bytes
    it received once the handler has turned its own parsing off, and tests and tools may pass text."""
    key = next((key for key in BODY_KEYS if request.get(key) is not None), None)
    if key is None or not looks_like_json(request[key]):
        return request
    return {**request, key: parse_json(request[key], limits)}


def image_bytes(request: Any, parameters: tuple[str, ...] = ()) -> bytes:
    """The encoded image of one request, or BadRequest saying what was found instead.

    `parameters` are the names of answer options (form fields) that arrive beside the image in the
    same dict: never taken for the image."""
    if isinstance(request, Mapping) and parameters:
        request = {key: value for key, value in request.items() if key not in parameters}
    value = pick_field(request) if isinstance(request, Mapping) else request
    return _to_image_bytes(value)


def looks_like_image(data: bytes) -> bool:
    return data.startswith(_MAGIC) or (data[:4] == b"RIFF" and data[8:12] == b"WEBP")


def pick_field(request: Mapping[str, Any]) -> Any:
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
        return image_from_text(value)
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
        return image_from_text(data.decode("utf-8", errors="replace"))
    decoded = _b64_or_none(data)
    return decoded if decoded else data  # unknown bytes: let the decoder say what is wrong


def image_from_text(text: str) -> bytes:
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
            return image_from_text(obj[key])
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
