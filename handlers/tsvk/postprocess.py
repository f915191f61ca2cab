"""Logits -> the top-k {label: probability} dict per image, the shape TorchServe's image_classifier returns;
and each answer (or error) written in the protocol its request spoke (inputs.py tells which).
"""

from __future__ import annotations

from typing import Any

import torch

from . import oip
from .errors import RequestError
from .inputs import OIP, Payload
from .labels import label_for


def topk_answers(logits: torch.Tensor, labels: list[str] | None, k: int) -> list[dict[str, float]]:
    """Softmax in float32 whatever the model's precision, then one device->host copy for the batch."""
    probabilities = torch.softmax(logits.float(), dim=1)
    values, indices = torch.topk(probabilities, min(k, probabilities.shape[1]), dim=1)
    return [_answer(labels, row_indices, row_values) for row_indices, row_values in zip(indices.tolist(), values.tolist())]


def _answer(labels: list[str] | None, indices: list[int], probabilities: list[float]) -> dict[str, float]:
    """{label: probability}, highest first. Label files may name two classes alike (ImageNet has two
    "crane"s and two "maillot"s); a dict would keep one of them and answer fewer than k classes, so a
    repeated name gets its class index: `crane (517)`."""
    answer: dict[str, float] = {}
    for index, probability in zip(indices, probabilities):
        label = label_for(labels, index)
        answer[f"{label} ({index})" if label in answer else label] = probability
    return answer


def first_tensor(output) -> torch.Tensor:
    """Models may return a tensor, a tuple/list of tensors, or a dict with 'logits' (or 'out', as
    torchvision's segmentation models do); take the logits."""
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, (list, tuple)) and output:
        return first_tensor(output[0])
    for key in ("logits", "out"):
        if isinstance(output, dict) and key in output:
            return output[key]
    raise TypeError(f"model output must be a tensor of logits, got {type(output).__name__}")


def write_answer(payload: Payload | None, answer: dict[str, float], model_name: str) -> Any:
    """/predictions: the dict itself; the Open Inference Protocol: an inference response of one image."""
    if payload is None or payload.protocol != OIP:
        return answer
    k = len(answer)
    outputs = [
        {"name": oip.PROBABILITIES, "datatype": "FP32", "shape": [1, k], "data": list(answer.values())},
        {"name": oip.LABELS, "datatype": "BYTES", "shape": [1, k], "data": list(answer)},
    ]
    response = {"model_name": model_name, "outputs": outputs}
    if payload.request_id is not None:
        response["id"] = payload.request_id
    return response


def write_error(payload: Payload | None, error: RequestError) -> dict[str, Any]:
    """/predictions: TorchServe's error shape plus our code; the Open Inference Protocol: its `{"error": ...}`,
    the message led by our machine-readable code (`bad_image: ...`)."""
    if payload is None or payload.protocol != OIP:
        return error.body()
    return {"error": f"{error.code}: {error.message}"}
