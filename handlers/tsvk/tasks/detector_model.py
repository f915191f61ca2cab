"""A torchvision detector in the form tsvk serves: it takes images tsvk has already resized and
normalized, and answers in the coordinates of those images.

torchvision's detectors (Faster/Mask R-CNN, RetinaNet, FCOS, SSD) all run a
`GeneralizedRCNNTransform` first: normalize, resize each image keeping its scale, pad into a batch;
and last: map boxes back to each input's size and paste masks there. tsvk does the first half itself,
batched and on the GPU when there is one (`tasks/detect.py`, the same arithmetic), and maps back to
the ORIGINAL photo, which the model never sees. So the model keeps only the padding: `PaddingOnly`
replaces its transform. It is plain TorchScript-compatible code, so the whole detector still scripts.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import torch
from torch import Tensor
from torchvision.models.detection.transform import GeneralizedRCNNTransform


class PaddingOnly(GeneralizedRCNNTransform):
    """The detector's transform minus normalize, resize and map-back: inputs arrive prepared."""

    def normalize(self, image: Tensor) -> Tensor:
        return image

    def resize(self, image: Tensor, target: Optional[Dict[str, Tensor]] = None) -> Tuple[Tensor, Optional[Dict[str, Tensor]]]:
        return image, target

    def postprocess(self, result: List[Dict[str, Tensor]], image_shapes: List[Tuple[int, int]],
                    original_image_sizes: List[Tuple[int, int]]) -> List[Dict[str, Tensor]]:
        return result


def is_detector(model: Any) -> bool:
    return isinstance(getattr(model, "transform", None), GeneralizedRCNNTransform)


def served_detector(model: torch.nn.Module) -> torch.nn.Module:
    """`model` with its transform swapped for `PaddingOnly` (same padding stride); eval mode."""
    original = model.transform
    if isinstance(original, PaddingOnly):
        return model.eval()
    model.transform = PaddingOnly(original.min_size, original.max_size, original.image_mean, original.image_std,
                                  size_divisible=original.size_divisible, fixed_size=original.fixed_size)
    return model.eval()


def _owner(model: Any, attribute: str) -> Any:
    """R-CNNs keep their thresholds on `roi_heads`; RetinaNet, FCOS and SSD on the model itself."""
    heads = getattr(model, "roi_heads", None)
    return heads if heads is not None and hasattr(heads, attribute) else model


def score_threshold_of(model: Any) -> float:
    return float(getattr(_owner(model, "score_thresh"), "score_thresh"))


def detections_per_image_of(model: Any) -> int:
    return int(getattr(_owner(model, "detections_per_img"), "detections_per_img"))


def set_score_threshold(model: Any, threshold: float) -> None:
    """The lowest score the model itself keeps (eager and TorchScript modules alike)."""
    setattr(_owner(model, "score_thresh"), "score_thresh", float(threshold))


def detections(output: Any) -> List[Dict[str, Tensor]]:
    """Scripted detectors return (losses, detections); eager ones the detections."""
    if isinstance(output, tuple) and len(output) == 2 and isinstance(output[1], list):
        return output[1]
    return output
