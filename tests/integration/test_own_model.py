"""A torchvision model fine-tuned to three classes, archived by its builder's name with its checkpoint and
labels, answers three classes under those labels from a real TorchServe.

The fine-tune is stood in for by a resnet18 whose head is replaced with a seeded three-class one: what tsvk
sees is the same, a state_dict whose `fc` has 3 outputs, saved with torch.save(model.state_dict(), path).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import torch
import torchvision
from PIL import Image

from tests.support.torchserve import post_concurrently, running_torchserve
from tsvk_tools.cli import main as tsvk
from tsvk_tools.images import jpeg_bytes, photo_array
from tsvk_tools.config.ports import serving_on_free_ports

LABELS = ["cat", "coffee", "rocket"]
PHOTOS = ["chelsea", "coffee", "astronaut"]


@pytest.fixture(scope="module")
def fine_tuned(tmp_path_factory) -> tuple[Path, Path]:
    """The checkpoint and labels file a user brings: resnet18 with a seeded 3-class head, one label a line."""
    folder = tmp_path_factory.mktemp("own-model")
    torch.manual_seed(0)
    model = torchvision.models.resnet18()
    model.fc = torch.nn.Linear(model.fc.in_features, len(LABELS))
    torch.nn.init.normal_(model.fc.weight, std=0.5)  # classes well apart, so the order is not a rounding matter
    torch.save(model.state_dict(), folder / "ft.pth")
    (folder / "labels.txt").write_text("\n".join(LABELS) + "\n")
    return folder / "ft.pth", folder / "labels.txt"


def _eager_answer(weights: Path, name: str) -> list[str]:
    """The checkpoint's own classes for a photo, through torchvision's preprocessing of the same JPEG."""
    model = torchvision.models.resnet18(num_classes=len(LABELS))
    model.load_state_dict(torch.load(weights, weights_only=True))
    image = Image.open(io.BytesIO(jpeg_bytes(photo_array(name)))).convert("RGB")
    with torch.no_grad():
        logits = model.eval()(torchvision.models.ResNet18_Weights.DEFAULT.transforms()(image).unsqueeze(0))
    return [LABELS[i] for i in logits[0].argsort(descending=True).tolist()]


def test_a_fine_tuned_torchvision_model_answers_its_own_classes(fine_tuned, tmp_path):
    weights, labels = fine_tuned
    store = tmp_path / "store"
    store.mkdir()
    assert tsvk(["archive", "--model", "resnet18", "--weights", str(weights), "--labels", str(labels),
                 "--max-batch", "4", "--model-store", str(store), "--quiet"]) == 0
    request = serving_on_free_ports(model_store=store, vcpus=2, workers=1, batch=4, max_batch_delay_ms=500)
    with running_torchserve(request, tmp_path) as run:
        responses = post_concurrently(f"{run.url('inference')}/predictions/resnet18",
                                      [jpeg_bytes(photo_array(name)) for name in PHOTOS], run.headers("inference"))
    assert [r.status_code for r in responses] == [200] * len(PHOTOS), [r.text for r in responses]
    for name, response in zip(PHOTOS, responses):
        answer = response.json()
        assert list(answer) == _eager_answer(weights, name), name  # all three classes, by the labels given, in order
        assert sum(answer.values()) == pytest.approx(1.0, abs=1e-4)


def test_the_eager_artifact_is_built_for_the_head_of_the_checkpoint(fine_tuned, tmp_path):
    """The eager form is rebuilt in the worker from the builder and the label count: the build loads it back
    with the handler's own loader and checks it against the checkpoint's model."""
    weights, labels = fine_tuned
    assert tsvk(["compile", "--model", "resnet18", "--backend", "eager", "--weights", str(weights),
                 "--labels", str(labels), "--output-dir", str(tmp_path), "--precision", "fp32", "--quiet"]) == 0
    report = json.loads((tmp_path / "resnet18" / "report.json").read_text())
    verification = report["provenance"]["verification"]
    assert verification["passed"] and verification["top1_agreement"] == 1.0, verification
    assert verification["max_abs_diff"] <= verification["allowed_abs_diff"], verification
    assert report["provenance"]["weights"]["random"] is False, report["provenance"]["weights"]
    artifact = torch.load(tmp_path / "resnet18" / report["artifact"]["file"], weights_only=True)
    checkpoint = torch.load(weights, weights_only=True)
    assert artifact["fc.weight"].shape == (len(LABELS), 512)  # the head of the checkpoint, not ImageNet's 1000 classes
    assert all(torch.equal(artifact[name], tensor) for name, tensor in checkpoint.items())
