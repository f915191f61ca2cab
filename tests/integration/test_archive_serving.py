"""A built .mar served by a real TorchServe, with tsvk hidden from the worker's Python."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
import torchvision
from PIL import Image

from tests.support.torchserve import isolated_env, post_concurrently, post_image, running_torchserve
from tsvk_tools.config.ports import serving_on_free_ports
from tsvk_tools.images import jpeg_bytes, photo_array


def eager_top5(weights_path, array, size: tuple[int, int] | None = None) -> list[str]:
    """What the eager model says on torchvision's own preprocessing of the same JPEG (full-size decode)."""
    import io

    meta = torchvision.models.ResNet18_Weights.DEFAULT
    model = torchvision.models.resnet18()
    model.load_state_dict(torch.load(weights_path, weights_only=True))
    image = Image.open(io.BytesIO(jpeg_bytes(array, size=size))).convert("RGB")
    with torch.no_grad():
        probabilities = model.eval()(meta.transforms()(image).unsqueeze(0)).softmax(1)[0]
    return [meta.meta["categories"][i] for i in probabilities.topk(5).indices.tolist()]


def test_isolation_really_hides_tsvk():
    env = {**isolated_env(), "PATH": ""}
    done = subprocess.run([sys.executable, "-c", "import tsvk"], env=env, capture_output=True, text=True)
    assert done.returncode != 0 and "No module named 'tsvk'" in done.stderr


def test_served_top5_equals_eager_top5_in_one_batch(resnet18_store, resnet18_weights, tmp_path):
    """Three real photographs and one non-image sent together: batched, each answered on its own."""
    photos = ["chelsea", "coffee", "astronaut"]
    bodies = [jpeg_bytes(photo_array(name)) for name in photos] + [b"not an image"]
    request = serving_on_free_ports(model_store=resnet18_store, vcpus=2, workers=1, batch=4, max_batch_delay_ms=500)
    with running_torchserve(request, tmp_path) as run:
        responses = post_concurrently(f"{run.url('inference')}/predictions/resnet18", bodies, run.headers("inference"))
    assert [r.status_code for r in responses] == [200, 200, 200, 400], [r.text for r in responses]
    for name, response in zip(photos, responses):
        assert list(response.json()) == eager_top5(resnet18_weights, photo_array(name)), name


def test_phone_camera_photos_get_the_eager_top5(resnet18_store, resnet18_weights, tmp_path):
    """12 MP JPEGs (decoded by the handler at a reduced DCT scale) against torchvision on the full image."""
    photos, size = ["chelsea", "coffee"], (4032, 3024)
    bodies = [jpeg_bytes(photo_array(name), size=size) for name in photos]
    request = serving_on_free_ports(model_store=resnet18_store, vcpus=2, workers=1, batch=2, max_batch_delay_ms=500)
    with running_torchserve(request, tmp_path) as run:
        responses = post_concurrently(f"{run.url('inference')}/predictions/resnet18", bodies, run.headers("inference"))
    assert [r.status_code for r in responses] == [200, 200], [r.text for r in responses]
    for name, response in zip(photos, responses):
        assert list(response.json()) == eager_top5(resnet18_weights, photo_array(name), size), name


@pytest.mark.parametrize("backend", ["eager", "torchscript"])
def test_custom_model_served_from_its_own_file(tmp_path, backend):
    """MODEL_FILE/MODEL_FACTORY archives: the eager one imports the packed tiny_model.py in the worker."""
    from pathlib import Path

    from tsvk_tools.cli import main

    fixtures = Path(__file__).parent.parent / "fixtures"
    store = tmp_path / "store"
    assert main(["archive", "--model", "tiny", "--backend", backend, "--model-file", str(fixtures / "tiny_model.py"),
                 "--model-factory", "TinyNet", "--resize", "40", "--crop", "32", "--labels", str(fixtures / "tiny_labels.txt"),
                 "--weights", "none", "--max-batch", "2", "--topk", "2", "--model-store", str(store)]) == 0
    with running_torchserve(serving_on_free_ports(model_store=store, vcpus=2, workers=1), tmp_path) as run:
        response = post_image(run, "tiny", jpeg_bytes(photo_array("coffee")))
    assert response.status_code == 200, response.text
    answer = response.json()
    assert len(answer) == 2 and set(answer) <= {"cat", "dog", "bird"}
    assert 0 < sum(answer.values()) <= 1.0001
