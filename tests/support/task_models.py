"""Seeded random weights for detection and segmentation tests, made decisive enough to answer.

A detector with random weights scores every box about 1/91 (its classifier is near uniform), so no
box passes a useful threshold; a much wider classifier head (std 10) spreads the scores (up to about
0.6 for the R-CNN on the scikit-image photos), and boxes appear. The
weights are saved as a state_dict and archived with `--weights <file>`, like any checkpoint.
"""

from __future__ import annotations

from pathlib import Path

import torch

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


def decisive_weights(builder: str, path: Path, seed: int = 0, std: float = 10.0) -> Path:
    """A seeded state_dict of `builder` whose classifier weights are wide (std `std`)."""
    from tsvk.tasks import torchvision_model

    task = "detect" if builder == DETECTOR or "rcnn" in builder or "ssd" in builder else "segment"
    torch.manual_seed(seed)
    model = torchvision_model(builder, task)
    for layer in _classifier_layers(model):
        torch.nn.init.normal_(layer.weight, std=std)
    torch.save(model.state_dict(), path)
    return path


def reference_model(builder: str, weights: Path):
    """torchvision's own model with these weights, its own transform intact: what answers are compared with."""
    import torchvision

    extra = {"weights_backbone": None}
    model = torchvision.models.get_model(builder, weights=None, **extra)
    model.load_state_dict(torch.load(weights, weights_only=True))
    return model.eval()
