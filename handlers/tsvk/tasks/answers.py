"""What models return, read the same way by every task: the logits tensor, and top-k {label: probability} dicts
(the shape TorchServe's image_classifier returns)."""

from __future__ import annotations

import torch

from ..common.labels import label_for


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
