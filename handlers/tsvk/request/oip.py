"""The Open Inference Protocol (KServe v2) view of a classifier: its tensors, and the checks on a request's input.

One module for both ends that speak it: the handler (which answers one image per TorchServe request: `read_oip`,
`write_answer`, `write_error`) and the front `tsvk serve --protocol oip` starts (tools/oip), which reads a client's
request, checks it with `check_input` and sends each of its images to TorchServe as a request of its own. What
model metadata states is what these checks enforce, so the two cannot drift apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from ..common.errors import BadTensor, RequestError
from .base import OIP, Request, unreadable
from .predictions import image_from_text

IMAGES = "images"  # BYTES [N]: encoded images (raw bytes over gRPC or binary REST, base64 text in JSON)
PIXELS = "pixels"  # FP32 [N, 3, crop, crop]: images the client resized, cropped and normalized itself
PROBABILITIES = "probabilities"  # FP32 [N, k]: the top-k probabilities of each image, highest first
LABELS = "labels"  # BYTES [N, k]: their class names
INPUT_NAMES = (IMAGES, PIXELS)
OUTPUT_NAMES = (PROBABILITIES, LABELS)
VARIABLE = -1  # a dimension of any size, as model metadata writes it


@dataclass(frozen=True)
class TensorSpec:
    """One named tensor of model metadata."""

    name: str
    datatype: str
    shape: tuple[int, ...]

    def metadata(self) -> dict:
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}


def input_specs(crop: int) -> tuple[TensorSpec, TensorSpec]:
    """A request carries one of these two: encoded images, or pixels preprocessed as the archive would."""
    return TensorSpec(IMAGES, "BYTES", (VARIABLE,)), TensorSpec(PIXELS, "FP32", (VARIABLE, 3, crop, crop))


def output_specs(k: int) -> tuple[TensorSpec, TensorSpec]:
    return TensorSpec(PROBABILITIES, "FP32", (VARIABLE, k)), TensorSpec(LABELS, "BYTES", (VARIABLE, k))


def answer_size(topk: int, classes: int | None) -> int:
    """Classes in each answer: top-k, or every class where the model has fewer."""
    return min(topk, classes) if classes else topk


def check_input(name: str, datatype: str, shape: Sequence[int], crop: int, max_items: int) -> int:
    """The number of images the input holds, or BadTensor saying what was sent and what is allowed."""
    specs = {spec.name: spec for spec in input_specs(crop)}
    if not isinstance(name, str) or name not in specs:
        raise BadTensor(f"input must be named {IMAGES!r} (BYTES, encoded images) or {PIXELS!r} "
                        f"(FP32 [N, 3, {crop}, {crop}]), got {name!r}")
    spec = specs[name]
    if datatype != spec.datatype:
        raise BadTensor(f"input {name!r} must have datatype {spec.datatype}, got {datatype!r}")
    shape = [int(d) for d in shape]
    fixed = list(spec.shape[1:])
    if len(shape) != len(spec.shape) or shape[1:] != fixed:
        wanted = ", ".join(["N"] + [str(d) for d in fixed])
        raise BadTensor(f"input {name!r} must have shape [{wanted}], got {shape}")
    if not 1 <= shape[0] <= max_items:
        raise BadTensor(f"input {name!r} must hold 1 to {max_items} images, got {shape[0]}")
    return shape[0]


def element_count(shape: Sequence[int]) -> int:
    return math.prod(int(d) for d in shape)


def write_answer(request: Request, answer: dict[str, float], model_name: str) -> dict[str, Any]:
    """An inference response of one image: its top-k probabilities and their labels."""
    k = len(answer)
    outputs = [
        {"name": PROBABILITIES, "datatype": "FP32", "shape": [1, k], "data": list(answer.values())},
        {"name": LABELS, "datatype": "BYTES", "shape": [1, k], "data": list(answer)},
    ]
    response = {"model_name": model_name, "outputs": outputs}
    if request.request_id is not None:
        response["id"] = request.request_id
    return response


def write_error(error: RequestError) -> dict[str, Any]:
    """The protocol's `{"error": ...}`, the message led by our machine-readable code (`bad_image: ...`)."""
    return {"error": f"{error.code}: {error.message}"}


def document_of(value: Any) -> Mapping[str, Any] | None:
    """The request's JSON object when it is an Open Inference Protocol request (it has `inputs`)."""
    return value if isinstance(value, Mapping) and "inputs" in value else None


def read_oip(document: Mapping[str, Any], crop: int, fields: Mapping[str, Any]) -> Request:
    """One image of an inference request (the handler answers one per TorchServe request), or why it cannot be
    read, answered in this protocol; `fields` is the request it came in."""
    request_id = document.get("id") if isinstance(document.get("id"), str) else None
    try:
        tensor = _single_input(document.get("inputs"))
        check_input(tensor.get("name"), tensor.get("datatype"), _shape(tensor), crop, max_items=1)
        if tensor["name"] == IMAGES:
            return Request(OIP, image=_oip_image(tensor.get("data")), request_id=request_id, fields=fields)
        return Request(OIP, pixels=_oip_pixels(tensor.get("data"), crop), request_id=request_id, fields=fields)
    except RequestError as err:
        return Request(OIP, error=err.detached(), request_id=request_id, fields=fields)
    except Exception as err:  # noqa: BLE001 - as read_request (protocols.py): this request fails alone, answered in its protocol
        return Request(OIP, error=unreadable(err), request_id=request_id, fields=fields)


def _single_input(inputs: Any) -> Mapping[str, Any]:
    if not isinstance(inputs, list) or len(inputs) != 1 or not isinstance(inputs[0], Mapping):
        raise BadTensor(f"inputs must be a list of exactly one tensor, {IMAGES!r} (BYTES) or {PIXELS!r} (FP32)")
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
        raise BadTensor(f"{IMAGES!r} data in JSON must be one base64 string per image")
    return image_from_text(items[0])


def _oip_pixels(data: Any, crop: int) -> np.ndarray:
    """The flat (or nested) row-major FP32 data as one (3, crop, crop) image, finite values only."""
    try:
        pixels = np.asarray(data, dtype=np.float32).reshape(-1)
    except (TypeError, ValueError):
        raise BadTensor(f"{PIXELS!r} data must be numbers") from None
    expected = element_count((3, crop, crop))
    if pixels.size != expected:
        raise BadTensor(f"{PIXELS!r} data holds {pixels.size} values; shape [1, 3, {crop}, {crop}] needs {expected}")
    if not np.isfinite(pixels).all():
        raise BadTensor(f"{PIXELS!r} data must be finite numbers (no NaN or infinity)")
    return pixels.reshape(3, crop, crop)
