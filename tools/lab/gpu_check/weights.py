"""Seeded, decisive weights for the check's archives: verification then judges the compiler, not a near tie.

A random classifier's logits lie close together, so a compiler's rounding may swap its top classes and
verification would fail or pass by chance; pretrained weights need a download. Widening the last linear
layer (std 0.5) spreads the logits apart, as the GPU tests' resnet18 weights do (tests/conftest.py).
"""

from __future__ import annotations

from pathlib import Path

SEEDED = "seeded"  # the --weights value that asks for these
CLASSIFIER_STD = 0.5


def write_seeded_weights(model: str, path: Path, seed: int = 0) -> Path:
    """torchvision's `model` with seeded random weights and a widened classifier, saved as a state_dict."""
    import torch
    import torchvision

    torch.manual_seed(seed)
    network = torchvision.models.get_model(model)
    last_linear = [module for module in network.modules() if isinstance(module, torch.nn.Linear)][-1]
    torch.nn.init.normal_(last_linear.weight, std=CLASSIFIER_STD)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(network.state_dict(), path)
    return path


def weights_argument(weights: str, model: str, work_dir: Path) -> str:
    """What the archive steps pass as --weights: the seeded file for `seeded`, else what was asked for."""
    return str(seeded_path(model, work_dir)) if weights == SEEDED else weights


def seeded_path(model: str, work_dir: Path) -> Path:
    return work_dir / f"{model}-seeded.pth"
