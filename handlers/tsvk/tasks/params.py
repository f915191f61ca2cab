"""Per-request answer options: multipart form fields, or fields of a JSON body, named as the option.

TorchServe 0.12 hands the handler each multipart form field under its own name, beside the image
(`curl -F data=@cat.jpg -F score_threshold=0.3`), and a JSON body parsed (`{"image": "<base64>",
"score_threshold": 0.3}`). It does not pass on the query string of a POST whose body is the raw image
(`?score_threshold=0.3` reaches the worker neither as a field nor as a header; checked against a real
TorchServe 0.12), so options travel in the body. A value that cannot be used is the client's mistake:
400, naming the option and what it may be.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..common.errors import BadRequest

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")


BODY_KEYS = ("body", "data")


def raw_value(request: Any, name: str) -> str | None:
    """The option's text, from a form field or a JSON body's field; None when the request does not carry it."""
    if not isinstance(request, Mapping):
        return None
    value = request.get(name)
    if value is None:
        body = next((request[key] for key in BODY_KEYS if isinstance(request.get(key), Mapping)), {})
        value = body.get(name)
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode("utf-8").strip()
        except UnicodeDecodeError:
            raise BadRequest(f"option {name} must be text") from None
    if isinstance(value, (list, tuple)) and value:
        value = value[0]
    return str(value).strip()


def number(request: Any, name: str, default: float, low: float, high: float) -> float:
    text = raw_value(request, name)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not low <= value <= high:
        raise BadRequest(f"option {name} must be a number from {low:g} to {high:g}, got {text!r}")
    return value


def whole(request: Any, name: str, default: int, low: int, high: int) -> int:
    text = raw_value(request, name)
    if text is None:
        return default
    if not text.isdigit() or not low <= int(text) <= high:
        raise BadRequest(f"option {name} must be a whole number from {low} to {high}, got {text!r}")
    return int(text)


def flag(request: Any, name: str, default: bool) -> bool:
    text = raw_value(request, name)
    if text is None:
        return default
    if text.lower() in TRUE_WORDS:
        return True
    if text.lower() in FALSE_WORDS:
        return False
    raise BadRequest(f"option {name} must be true or false, got {text!r}")
