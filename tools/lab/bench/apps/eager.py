"""The model code a user writes without tsvk: torchvision eager model, the weights' own transforms.

Shared by the Flask app, the LitServe app and the one-process-per-job runs, so the three differ only
in how they serve, not in how they classify. On a GPU (`device="cuda"`) the model and each batch
live there, as a user moving a CPU script to a GPU box would write it; decoding stays on the CPU.
"""

from __future__ import annotations

import io
from pathlib import Path

import torch

TOPK = 5


def load_eager_model(name: str, weights: Path, device: str = "cpu") -> torch.nn.Module:
    import torchvision.models as tvm

    model = tvm.get_model(name, weights=None)
    model.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
    return model.eval().to(device)


class EagerClassifier:
    """Decode with Pillow, transform with the weights' transforms, run the eager model, top-5."""

    def __init__(self, name: str, weights: Path, device: str = "cpu"):
        import torchvision.models as tvm

        meta = tvm.get_model_weights(name).DEFAULT
        self.transform = meta.transforms()
        self.labels = list(meta.meta["categories"])
        self.device = torch.device(device)
        self.model = load_eager_model(name, weights, device)

    def tensor(self, jpeg: bytes) -> torch.Tensor:
        from PIL import Image

        with Image.open(io.BytesIO(jpeg)) as image:
            return self.transform(image.convert("RGB"))

    def logits(self, batch: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            return self.model(batch.to(self.device))

    def answers(self, logits: torch.Tensor) -> list[dict[str, float]]:
        """The {label: probability} shape TorchServe's image_classifier returns."""
        values, indices = torch.softmax(logits, dim=1).topk(TOPK, dim=1)
        return [{self.labels[i]: p for i, p in zip(row_i, row_p)} for row_i, row_p in zip(indices.tolist(), values.tolist())]

    def classify(self, jpeg: bytes) -> dict[str, float]:
        return self.answers(self.logits(self.tensor(jpeg).unsqueeze(0)))[0]
