"""JSON request bodies parsed within bounds: their size, nesting depth and number of values are checked
before a single Python object is built.

Parsed JSON costs far more memory than its text: a 16 MiB body of `[[],[],...]` becomes 444 MiB in
orjson and 378 MiB in Python's json (docs/robustness.md), and a body nested a thousand deep makes the
parser raise RecursionError. The checks are counts over the bytes (C speed, no objects made):

- size: at most `max_bytes`;
- values: commas + colons + opening brackets + 1 is at least the number of values the parse would make
  (each value after the first in an array or object follows a comma, an object's value follows its
  key's colon, the first one follows its bracket); characters inside strings only make it larger;
- depth: worked out from the brackets left once strings are blanked, only where there are more
  opening brackets than `max_depth` (base64 images and flat tensors never need it).

TorchServe parses `application/json` bodies itself before the handler sees them, without bounds; the
handler turns that off at load (`hand_json_to_the_handler`), so every JSON body is parsed here.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..common.defaults import MAX_JSON_DEPTH, MAX_JSON_MB, MAX_JSON_VALUES
from ..common.errors import BadRequest, JsonTooDeep, JsonTooLarge

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')  # a JSON string, escapes included, as one match
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))
_OPENING = (ord("["), ord("{"))
JSON_STARTS = (b"{", b"[")


@dataclass(frozen=True)
class JsonLimits:
    max_bytes: int = MAX_JSON_MB * 2**20
    max_depth: int = MAX_JSON_DEPTH
    max_values: int = MAX_JSON_VALUES


def limits_for_pixels(values: int) -> JsonLimits:
    """The default limits, with room for `values` numbers of preprocessed pixels besides (the Open Inference
    Protocol's FP32 input, sent as JSON numbers: 150,528 for one 224x224 image, ~5 MiB once parsed)."""
    return JsonLimits(max_values=MAX_JSON_VALUES + values)


def looks_like_json(data: Any) -> bool:
    """Bytes or text that start, after white space, like a JSON object or array."""
    if isinstance(data, str):
        return data.lstrip()[:1] in ("{", "[")
    return isinstance(data, (bytes, bytearray)) and bytes(data[:64]).lstrip()[:1] in JSON_STARTS


def parse_json(data: bytes | bytearray | str, limits: JsonLimits = JsonLimits()) -> Any:
    """The parsed body, or JsonTooLarge / JsonTooDeep naming the limit, or BadRequest when it does not parse."""
    raw = data.encode("utf-8", errors="surrogatepass") if isinstance(data, str) else data  # a bytearray is not copied
    check_json(raw, limits)
    try:
        return json.loads(raw)
    except json.JSONDecodeError as err:
        raise BadRequest(f"request body looks like JSON but does not parse (line {err.lineno}, column {err.colno})") from None
    except (ValueError, RecursionError):
        raise BadRequest("request body looks like JSON but does not parse") from None


def check_json(raw: bytes | bytearray, limits: JsonLimits = JsonLimits()) -> None:
    """Refuse a body whose parse would be too large or too deep, from counts over its bytes."""
    if len(raw) > limits.max_bytes:
        raise JsonTooLarge(f"JSON body is {len(raw)} bytes; the limit is {limits.max_bytes} (send the image as raw bytes instead)")
    opening = raw.count(b"[") + raw.count(b"{")
    values = 1 + opening + raw.count(b",") + raw.count(b":")
    if values > limits.max_values:
        raise JsonTooLarge(f"JSON body holds up to {values} values; the limit is {limits.max_values}")
    if opening > limits.max_depth:
        depth = nesting_depth(raw)
        if depth > limits.max_depth:
            raise JsonTooDeep(f"JSON body is nested {depth} deep; the limit is {limits.max_depth}")


def nesting_depth(raw: bytes | bytearray) -> int:
    """The deepest bracket nesting outside strings; BadRequest where those brackets do not balance (the
    parse would fail anyway), which also bounds the work here by the opening brackets already counted."""
    brackets = bytes(_STRING.sub(b'""', raw)).translate(None, _NOT_BRACKETS)
    opening = brackets.count(b"[") + brackets.count(b"{")
    if 2 * opening != len(brackets):
        raise BadRequest("request body looks like JSON but does not parse: its brackets do not balance")
    if not brackets:
        return 0
    codes = np.frombuffer(brackets, dtype=np.uint8)
    steps = ((codes == _OPENING[0]) | (codes == _OPENING[1])).astype(np.int8) * np.int8(2) - np.int8(1)
    return int(np.cumsum(steps, dtype=np.int32).max())


def hand_json_to_the_handler() -> None:
    """Make this TorchServe worker pass JSON (and text) bodies on as the bytes received, for `parse_json`.

    Follows ts/protocol/otf_message_handler.py of TorchServe 0.12.0: `_retrieve_input_data` reads
    TS_DECODE_INPUT_REQUEST from the environment for each input and, unless it is "false", runs
    json.loads (no bounds) on every application/json body, in the worker, before the handler runs. The
    frontend sets it from `decode_input_request` in config.properties; setting it here, in the worker's
    own environment at load, covers an archive served under any config."""
    os.environ["TS_DECODE_INPUT_REQUEST"] = "false"
