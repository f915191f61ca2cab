"""Test helpers for the run-time package: a TorchServe-like context, images, and archive folders.

`FakeContext` has the parts of `ts.context.Context` the handler touches (system_properties,
model_yaml_config, metrics, set_response_status); `FakeMetrics` records what the handler reports.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from PIL import Image

TINY_MODEL_CODE = '''
import torch


class TinyNet(torch.nn.Module):
    """A few thousand parameters: enough to have distinct logits, fast on any CPU."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.features = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=2), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(4))
        self.head = torch.nn.Linear(8 * 16, num_classes)

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1))


def build():
    return TinyNet()
'''


class FakeMetrics:
    """Records add_time / add_metric / add_counter calls as (kind, name, value, {dimension: value})."""

    def __init__(self):
        self.calls: list[tuple[str, str, float, dict[str, str]]] = []

    def add_time(self, name, value, idx=None, unit="ms", dimensions=None, metric_type=None):
        self.calls.append(("time", name, value, _dims(dimensions)))

    def add_metric(self, name, value, unit, idx=None, dimensions=None, metric_type=None):
        self.calls.append(("metric", name, value, _dims(dimensions)))

    def add_counter(self, name, value, idx=None, dimensions=None):
        self.calls.append(("counter", name, value, _dims(dimensions)))

    def values(self, name: str) -> list[float]:
        return [value for _, n, value, _ in self.calls if n == name]


def _dims(dimensions) -> dict[str, str]:
    return {d.name: d.value for d in dimensions or []}


class FakeContext:
    def __init__(self, model_dir: Path, model_yaml_config: dict, gpu_id=None, batch_size: int = 4, model_name: str = "tiny"):
        self.model_name = model_name
        self.system_properties = {"model_dir": str(model_dir), "gpu_id": gpu_id, "batch_size": batch_size}
        self.model_yaml_config = model_yaml_config
        self.metrics = FakeMetrics()
        self.statuses: dict[int, tuple[int, str]] = {}

    def set_response_status(self, code: int = 200, phrase: str = "", idx: int = 0) -> None:
        self.statuses[idx] = (code, phrase)


def encode(image: Image.Image | np.ndarray, fmt: str = "JPEG", **options: Any) -> bytes:
    if isinstance(image, np.ndarray):
        image = Image.fromarray(image)
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def photo(name: str = "chelsea", size: tuple[int, int] | None = None) -> Image.Image:
    """A real photograph from scikit-image (no download), optionally resized to (width, height)."""
    import skimage.data

    image = Image.fromarray(getattr(skimage.data, name)()).convert("RGB")
    return image.resize(size, Image.BILINEAR) if size else image


def noise_image(width: int = 64, height: int = 48, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def tsvk_section(artifact: dict, preprocess: dict | None = None, runtime: dict | None = None, **extra: Any) -> dict:
    section = {"model_name": "tiny", "artifact": artifact, "preprocess": preprocess or {}, "runtime": runtime or {"topk": 3}}
    section.update(extra)
    return {"batchSize": 4, "tsvk": section}


def write_tiny_eager_archive(model_dir: Path, num_classes: int = 10, preprocess: dict | None = None, labels: bool = True) -> dict:
    """A model dir holding model.py + a state_dict, as `tsvk archive` lays it out; returns the model yaml."""
    import importlib.util

    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "model.py").write_text(TINY_MODEL_CODE)
    spec = importlib.util.spec_from_file_location("tiny_model_for_test", model_dir / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    torch.save(module.TinyNet(num_classes).state_dict(), model_dir / "model_state.pt")
    if labels:
        (model_dir / "index_to_name.json").write_text(json.dumps({str(i): f"class_{i}" for i in range(num_classes)}))
    config = tsvk_section(
        {"file": "model_state.pt", "format": "eager", "source": {"kind": "file", "file": "model.py", "factory": "build"}},
        preprocess=preprocess or {"resize": 40, "crop": 32, "backend": "cpu"},
    )
    (model_dir / "model-config.yaml").write_text(yaml.safe_dump(config))
    return config


def tiny_module(model_dir: Path):
    """The model.py in `model_dir` (write_tiny_eager_archive's TinyNet, or a test's own), imported from there."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("tiny_model_for_test", model_dir / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
