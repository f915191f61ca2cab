"""The Open Inference Protocol (KServe v2) view of a classifier: its tensors, and the checks on a request's input.

One module for both ends that speak it: the handler (which answers one image per TorchServe request) and
the front `tsvk serve --protocol oip` starts (tools/oip), which reads a client's request, checks it with
`check_input` and sends each of its images to TorchServe as a request of its own. What model metadata
states is what these checks enforce, so the two cannot drift apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from .errors import BadTensor

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
