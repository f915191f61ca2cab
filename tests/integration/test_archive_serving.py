"""A built .mar served by a real TorchServe, with tsvk hidden from the worker's Python."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
import torchvision
from PIL import Image

from tests.support.torchserve import isolated_env, post_image, request_on_free_ports, running_torchserve
from tsvk_tools.images import jpeg_bytes, photo_array


def eager_top5(weights_path, array) -> list[str]:
    """What the eager model says on torchvision's own preprocessing of the same JPEG."""
    import io

    meta = torchvision.models.ResNet18_Weights.DEFAULT
    model = torchvision.models.resnet18()
    model.load_state_dict(torch.load(weights_path, weights_only=True))
    image = Image.open(io.BytesIO(jpeg_bytes(array))).convert("RGB")
    with torch.no_grad():
        probabilities = model.eval()(meta.transforms()(image).unsqueeze(0)).softmax(1)[0]
    return [meta.meta["categories"][i] for i in probabilities.topk(5).indices.tolist()]


def test_isolation_really_hides_tsvk():
    env = {**isolated_env(), "PATH": ""}
    done = subprocess.run([sys.executable, "-c", "import tsvk"], env=env, capture_output=True, text=True)
    assert done.returncode != 0 and "No module named 'tsvk'" in done.stderr


@pytest.mark.parametrize("photo", ["chelsea", "coffee"])
def test_served_top5_equals_eager_top5(resnet18_store, resnet18_weights, tmp_path, photo):
    array = photo_array(photo)
    with running_torchserve(request_on_free_ports(model_store=resnet18_store, vcpus=2, workers=1), tmp_path) as run:
        response = post_image(run, "resnet18", jpeg_bytes(array))
    assert response.status_code == 200, response.text
    assert list(response.json()) == eager_top5(resnet18_weights, array)
