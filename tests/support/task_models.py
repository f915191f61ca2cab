"""Seeded decisive weights (tools/lab/robustness/task_weights.py) and torchvision's own model to compare answers with."""

from __future__ import annotations

from pathlib import Path

import torch

from tsvk_tools.lab.robustness.task_weights import DETECTOR, DETECTOR_CLASSIFIER_STD, SEGMENTER, decisive_weights

__all__ = ["DETECTOR", "DETECTOR_CLASSIFIER_STD", "SEGMENTER", "decisive_weights", "reference_model"]


def reference_model(builder: str, weights: Path):
    """torchvision's own model with these weights, its own transform intact: what answers are compared with."""
    import torchvision

    extra = {"weights_backbone": None}
    model = torchvision.models.get_model(builder, weights=None, **extra)
    model.load_state_dict(torch.load(weights, weights_only=True))
    return model.eval()
