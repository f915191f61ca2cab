"""Per-request answer options, read from the request's query string (or form fields).

TorchServe 0.12 puts each query parameter of `POST /predictions/<model>?score_threshold=0.3` into the
request's dict under its name, beside the body (as text, or bytes for some clients); a multipart form
field of the same name arrives the same way. A value that cannot be used is the client's mistake:
400, naming the parameter and what it may be.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..errors import BadRequest

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")


def raw_value(request: Any, name: str) -> str | None:
    """The parameter's text, or None when the request does not carry it."""
    if not isinstance(request, Mapping) or request.get(name) is None:
        return None
    value = request[name]
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode("utf-8").strip()
        except UnicodeDecodeError:
            raise BadRequest(f"query parameter {name} must be text") from None
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
        raise BadRequest(f"query parameter {name} must be a number from {low:g} to {high:g}, got {text!r}")
    return value


def whole(request: Any, name: str, default: int, low: int, high: int) -> int:
    text = raw_value(request, name)
    if text is None:
        return default
    if not text.isdigit() or not low <= int(text) <= high:
        raise BadRequest(f"query parameter {name} must be a whole number from {low} to {high}, got {text!r}")
    return int(text)


def flag(request: Any, name: str, default: bool) -> bool:
    text = raw_value(request, name)
    if text is None:
        return default
    if text.lower() in TRUE_WORDS:
        return True
    if text.lower() in FALSE_WORDS:
        return False
    raise BadRequest(f"query parameter {name} must be true or false, got {text!r}")
