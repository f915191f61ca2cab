"""Seeded random weights for detectors and segmenters, made decisive enough to answer (tests and the
robustness run serve them: a detector whose boxes all score below every threshold never makes a mask).

A detector with random weights scores every box about 1/91 (its classifier is near uniform), so no
box passes a useful threshold. A detector's FPN gets its inputs lifted to values near 1 (below) and a
wider classifier head (std 2), so boxes score from about 0.2 to 0.99, each differently, and boxes
appear; a segmenter gets a wider classifier head. The
weights are saved as a state_dict and archived with `--weights <file>`, like any checkpoint.
"""

from __future__ import annotations

from pathlib import Path

import torch

from tsvk.common import TASK_KINDS as TASKS
from tsvk.tasks import torchvision_model

DETECTOR = "fasterrcnn_mobilenet_v3_large_320_fpn"
SEGMENTER = "lraspp_mobilenet_v3_large"


def _classifier_layers(model) -> list[torch.nn.Module]:
    """The layers that turn features into class scores, for the detectors and segmenters tests use."""
    heads = getattr(model, "roi_heads", None)
    if heads is not None:
        return [heads.box_predictor.cls_score]
    if hasattr(model, "classifier"):  # LR-ASPP: low and high resolution classifiers
        return [m for m in model.classifier.modules() if isinstance(m, torch.nn.Conv2d) and m.out_channels == 21]
    raise ValueError(f"no classifier layer known for {type(model).__name__}")


def _lift_fpn_inputs(model) -> None:
    """Scale an FPN's lateral convolutions so the feature maps are near 1, not near 1e-8.

    A randomly initialised MobileNetV3 answers values near 1e-8; through the FPN every box then gets
    the same features, the classifier's bias alone decides, and all boxes score alike to 6 digits, so
    which 100 of them a detector keeps is arbitrary and two processes may keep different ones. The
    lateral convolutions have no bias, so scaling their weights scales every feature map after them."""
    fpn = getattr(getattr(model, "backbone", None), "fpn", None)
    if fpn is None:
        return
    with torch.no_grad():
        levels = model.backbone.body(torch.rand(1, 3, 320, 416, generator=torch.Generator().manual_seed(0)))
        for block, level in zip(fpn.inner_blocks, levels.values()):
            conv = block[0] if isinstance(block, torch.nn.Sequential) else block
            conv.weight.mul_(1.0 / float(level.abs().max()))


DETECTOR_CLASSIFIER_STD = 2.0  # with features near 1: scores spread over 0.2-0.99, none saturated at 1


def decisive_weights(builder: str, path: Path, seed: int = 0, std: float | None = None) -> Path:
    """A seeded state_dict of `builder` whose classifier weights are wide (std `std`; a detector's
    default DETECTOR_CLASSIFIER_STD, anything else's 10), a detector's FPN fed features near 1."""
    kind = TASKS["detect"] if builder == DETECTOR or "rcnn" in builder or "ssd" in builder else TASKS["segment"]
    torch.manual_seed(seed)
    model = torchvision_model(kind.name, builder).eval()
    if kind.image_list:  # a detector
        _lift_fpn_inputs(model)
    for layer in _classifier_layers(model):
        torch.nn.init.normal_(layer.weight, std=std or (DETECTOR_CLASSIFIER_STD if kind.image_list else 10.0))
    torch.save(model.state_dict(), path)
    return path
