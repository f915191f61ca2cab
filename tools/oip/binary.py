"""REST requests in the binary tensor extension (tritonclient's default), read without turning bytes into text.

The KServe SDK 0.21 reads a binary BYTES input and then re-encodes it as UTF-8 text
(`InferRequest.from_bytes` calls `set_data_from_numpy(..., binary_data=False)`), so any encoded image
sent that way is refused with a 500 ("Failed to encode ... using UTF-8"). The front's data plane reads
such bodies here instead, into the SDK's own request objects with the bytes kept as bytes.
"""

from __future__ import annotations

import struct

import numpy as np
import orjson
from kserve.errors import InvalidInput
from kserve.protocol.infer_type import InferInput, InferRequest, RequestedOutput, deserialize_bytes_tensor
from kserve.utils.numpy_codec import to_np_dtype

HEADER_LENGTH_NAME = "Inference-Header-Content-Length"


def request_from_binary(body: bytes, header_length_text: str, model_name: str) -> InferRequest:
    """The request whose JSON header is the first Inference-Header-Content-Length bytes (`header_length_text`,
    as the client sent it), binary tensors following in input order."""
    json_length = header_length(header_length_text, len(body))
    try:
        header = orjson.loads(body[:json_length])
    except orjson.JSONDecodeError as err:
        raise InvalidInput(f"bad_request: the JSON header of the request does not parse: {err}") from None
    if not isinstance(header, dict):
        raise InvalidInput("bad_request: the JSON header of the request must be an object")
    inputs, offset = [], json_length
    for entry in header.get("inputs") or []:
        tensor, offset = _input(entry, body, offset)
        inputs.append(tensor)
    outputs = [RequestedOutput(name=o["name"], parameters=o.get("parameters")) for o in header.get("outputs") or []]
    return InferRequest(model_name=model_name, infer_inputs=inputs, request_id=header.get("id"),
                        parameters=header.get("parameters"), request_outputs=outputs or None)


def header_length(text: str, body_length: int) -> int:
    """The JSON header's length: a whole number of bytes, at most the body's; anything else is the client's error."""
    digits = str(text).strip()
    length = int(digits) if digits.isascii() and digits.isdigit() and len(digits) <= 20 else -1
    if not 0 < length <= body_length:
        raise InvalidInput(f"bad_request: {HEADER_LENGTH_NAME} must be a whole number of bytes from 1 to the body's "
                           f"{body_length}, got {str(text)[:40]!r}")
    return length


def _input(entry: dict, body: bytes, offset: int) -> tuple[InferInput, int]:
    try:
        tensor = InferInput(name=entry["name"], shape=entry["shape"], datatype=entry["datatype"], parameters=entry.get("parameters"))
    except (KeyError, TypeError, AttributeError):
        raise InvalidInput("bad_tensor: each input needs a name, a shape and a datatype") from None
    if entry.get("data") is not None:
        tensor.data = entry["data"]
        return tensor, offset
    size = (entry.get("parameters") or {}).get("binary_data_size")
    if not isinstance(size, int) or size < 0 or offset + size > len(body):
        raise InvalidInput(f"bad_tensor: input {tensor.name!r} has neither data nor a binary_data_size within the body")
    tensor.data = _values(tensor, body[offset:offset + size])
    return tensor, offset + size


def _values(tensor: InferInput, raw: bytes):
    if tensor.datatype == "BYTES":
        try:
            return list(deserialize_bytes_tensor(raw))
        except struct.error:
            raise InvalidInput(f"bad_tensor: input {tensor.name!r}: its elements' 4-byte length prefixes run past its "
                               f"{len(raw)} bytes") from None
    dtype = to_np_dtype(tensor.datatype)
    if dtype is None or len(raw) % np.dtype(dtype).itemsize:
        raise InvalidInput(f"bad_tensor: input {tensor.name!r}: {len(raw)} bytes are not a whole number of {tensor.datatype} values")
    return np.frombuffer(raw, dtype=dtype)
