"""A detector (eager, and with its backbone in OpenVINO) and a segmenter served by a real TorchServe 0.12
(tsvk hidden from the worker's Python):
answers for real photographs equal torchvision's eager model on the same pixels, photos of different
sizes share a batch, an EXIF-rotated photo maps back to its displayed frame, a bad image fails alone,
and options sent as form or JSON fields shape the answer.

Weights are seeded and random (nothing can be downloaded), with wide classifier heads so boxes and
classes appear (tests/support/task_models.py); photos are sent as PNG where answers are compared with
the eager model, so both sides see the very same pixels.
"""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
import requests
import torch
import torchvision
import torchvision.transforms.functional as TF
from PIL import Image, ImageOps

from tests.support.handler_fakes import encode, photo
from tests.support.task_models import DETECTOR, SEGMENTER, decisive_weights, reference_model
from tests.support.torchserve import post_concurrently, running_torchserve
from tsvk.tasks.geometry import resize_label_map
from tsvk_tools.archive.pack import build_archive
from tsvk_tools.archive.build import BuildRequest
from tsvk_tools.config.ports import serving_on_free_ports
from tsvk_tools.archive.verify_tasks import match_boxes

pytestmark = pytest.mark.integration

SCORE_THRESHOLD = 0.3
PHOTOS = ("chelsea", "astronaut", "coffee")  # 451x300, 512x512, 600x400


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    work = tmp_path_factory.mktemp("tasks")
    store = work / "model_store"
    weights = {DETECTOR: decisive_weights(DETECTOR, work / "detector.pt"), SEGMENTER: decisive_weights(SEGMENTER, work / "seg.pt", std=1.0)}
    build_archive(BuildRequest(model=DETECTOR, backend="torchscript", weights=str(weights[DETECTOR]), max_batch=4,
                              score_threshold=SCORE_THRESHOLD), store)
    # fp32 whatever the CPU: the label maps are compared with torchvision's eager fp32 model
    build_archive(BuildRequest(model=SEGMENTER, backend="export", weights=str(weights[SEGMENTER]), precision="fp32", max_batch=4),
                  store)
    request = serving_on_free_ports(model_store=store, vcpus=2, workers=1, batch=4, max_batch_delay_ms=500, auth=False)
    with running_torchserve(request, work) as run:
        yield run.url("inference"), weights


def post(url: str, model: str, body: bytes, **options) -> requests.Response:
    """The photo as the raw body, or with options as a multipart form (TorchServe 0.12 drops a POST's query string)."""
    if not options:
        return requests.post(f"{url}/predictions/{model}", data=body, timeout=120)
    return requests.post(f"{url}/predictions/{model}", files={"data": body}, data={k: str(v) for k, v in options.items()}, timeout=120)


def as_tensors(answer: list[dict]) -> dict:
    return {"boxes": torch.tensor([a["box"] for a in answer]).reshape(-1, 4), "scores": torch.tensor([a["score"] for a in answer]),
            "labels": torch.zeros(len(answer), dtype=torch.long)}


@pytest.fixture(scope="module")
def served_openvino_detector(tmp_path_factory):
    """The detector again, its backbone in OpenVINO (`--backend openvino`), in a TorchServe of its own."""
    import openvino  # noqa: F401  # pinned in requirements.txt: a broken install must fail the suite, not skip it
    work = tmp_path_factory.mktemp("openvino_detector")
    weights = decisive_weights(DETECTOR, work / "detector.pt")
    build_archive(BuildRequest(model=DETECTOR, backend="openvino", weights=str(weights), max_batch=4,
                              score_threshold=SCORE_THRESHOLD), work / "model_store")
    request = serving_on_free_ports(model_store=work / "model_store", vcpus=2, workers=1, batch=4, max_batch_delay_ms=500,
                                    auth=False)
    with running_torchserve(request, work) as run:
        yield run.url("inference"), {DETECTOR: weights}


def test_detections_equal_torchvisions_eager_model_in_original_pixels(served):
    assert_detections_equal_eager(*served)


def test_an_openvino_backbone_answers_as_torchvisions_eager_model(served_openvino_detector):
    assert_detections_equal_eager(*served_openvino_detector)


def assert_detections_equal_eager(url: str, weights: dict) -> None:
    reference = reference_model(DETECTOR, weights[DETECTOR])
    for name in PHOTOS:
        image = photo(name)
        response = post(url, DETECTOR, encode(image, "PNG"))
        assert response.status_code == 200, response.text
        answer = response.json()
        with torch.no_grad():
            expected = reference([TF.to_tensor(image)])[0]
        keep = expected["scores"] >= SCORE_THRESHOLD
        assert 0 < len(answer) == int(keep.sum())
        categories = torchvision.models.get_model_weights(DETECTOR).DEFAULT.meta["categories"]
        got = {**as_tensors(answer), "labels": torch.tensor([categories.index(a["label"]) for a in answer])}
        wanted = {key: value[keep] for key, value in expected.items()}
        # Random weights score many boxes alike: their order (and which of them make the model's 100) may
        # differ between two processes' floating point; so boxes are matched as sets, tightly.
        pairs = match_boxes(wanted, got, min_iou=0.99)
        assert len(pairs) >= 0.9 * len(answer), (name, len(pairs), len(answer))
        for r, g in pairs:
            assert torch.allclose(got["boxes"][g], wanted["boxes"][r], atol=0.02)  # answers are rounded to 0.01 px
            assert abs(float(got["scores"][g]) - float(wanted["scores"][r])) < 1e-4


def test_photos_of_different_sizes_share_a_batch_and_a_bad_one_fails_alone(served):
    url, _ = served
    bodies = [encode(photo(name)) for name in PHOTOS] + [b"\xff\xd8\xff not a jpeg"]
    responses = post_concurrently(f"{url}/predictions/{DETECTOR}", bodies)
    assert [r.status_code for r in responses] == [200, 200, 200, 400], [r.text[:200] for r in responses]
    assert responses[3].json()["error"] == "bad_image"
    for name, response in zip(PHOTOS, responses):
        width, height = photo(name).size
        boxes = torch.tensor([a["box"] for a in response.json()])
        assert len(boxes) and boxes[:, 0].min() >= 0 and boxes[:, 1].min() >= 0
        assert boxes[:, 2].max() <= width and boxes[:, 3].max() <= height
        assert (boxes[:, 2] > boxes[:, 0]).all() and (boxes[:, 3] > boxes[:, 1]).all()


def test_an_exif_rotated_photo_maps_back_to_its_displayed_frame(served):
    """The camera stored the photo on its side and says so in EXIF (orientation 6): boxes come back in the
    upright photo's pixels, as for the same photo stored upright."""
    url, _ = served
    upright = photo("coffee")  # 600x400
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to display
    sideways = encode(upright.transpose(Image.Transpose.ROTATE_90), "JPEG", quality=95, exif=exif.tobytes())
    displayed = ImageOps.exif_transpose(Image.open(io.BytesIO(sideways)))
    assert displayed.size == upright.size
    rotated = post(url, DETECTOR, sideways).json()
    stored_upright = post(url, DETECTOR, encode(displayed, "PNG")).json()
    assert len(rotated) == len(stored_upright) > 0
    pairs = match_boxes(as_tensors(stored_upright), as_tensors(rotated), min_iou=0.95)
    assert len(pairs) >= 0.95 * len(rotated)
    assert max(a["box"][2] for a in rotated) <= upright.width and max(a["box"][3] for a in rotated) <= upright.height


def test_options_shape_the_answer_and_bad_ones_are_400(served):
    url, _ = served
    body = encode(photo("chelsea"), "PNG")
    default = post(url, DETECTOR, body).json()
    few = post(url, DETECTOR, body, max_detections=3).json()
    assert len(default) > 3 and len(few) == 3
    assert [a["score"] for a in few] == [a["score"] for a in default[:3]]  # the best three, best first
    lower = post(url, DETECTOR, body, score_threshold=0.05).json()
    assert len(lower) >= len(default) and min(a["score"] for a in lower) >= 0.05
    assert post(url, DETECTOR, body, score_threshold=0.99).json() == []
    as_json = requests.post(f"{url}/predictions/{DETECTOR}", json={"image": base64.b64encode(body).decode(), "max_detections": 2},
                            timeout=120)
    assert as_json.status_code == 200 and len(as_json.json()) == 2
    bad = post(url, DETECTOR, body, score_threshold="high")
    assert bad.status_code == 400 and "score_threshold" in bad.json()["message"]
    below_floor = post(url, DETECTOR, body, score_threshold=0.001)
    assert below_floor.status_code == 400 and "from 0.05" in below_floor.json()["message"]


def label_map(answer: dict) -> torch.Tensor:
    png = Image.open(io.BytesIO(base64.b64decode(answer["label_map"]["data"])))
    return torch.from_numpy(np.array(png))


def test_label_maps_agree_with_torchvisions_eager_model_in_original_pixels(served):
    url, weights = served
    reference = reference_model(SEGMENTER, weights[SEGMENTER])
    transforms = torchvision.models.get_model_weights(SEGMENTER).DEFAULT.transforms()
    bodies = [encode(photo(name), "PNG") for name in PHOTOS]
    responses = post_concurrently(f"{url}/predictions/{SEGMENTER}", bodies)  # three sizes, one batch
    for name, response in zip(PHOTOS, responses):
        assert response.status_code == 200, response.text
        answer, (width, height) = response.json(), photo(name).size
        assert (answer["width"], answer["height"]) == (width, height)
        served_map = label_map(answer)
        assert served_map.shape == (height, width)
        with torch.no_grad():
            expected = reference(transforms(photo(name)).unsqueeze(0))["out"][0].argmax(0)
        agreement = (resize_label_map(expected, (height, width)) == served_map).float().mean().item()
        assert agreement >= 0.999, (name, agreement)  # torchvision resizes the PIL image, tsvk the tensor
        assert sum(c["pixels"] for c in answer["classes"]) == pytest.approx(width * height, abs=len(answer["classes"]))
        assert len(answer["classes"]) >= 2  # the wide head makes the map depend on the photo


def test_label_map_options(served):
    url, _ = served
    body = encode(photo("coffee"))
    small = post(url, SEGMENTER, body, label_map_max_side=100).json()
    assert (small["label_map"]["width"], small["label_map"]["height"]) == (100, 67) and label_map(small).shape == (67, 100)
    assert "label_map" not in post(url, SEGMENTER, body, label_map="false").json()
    assert post(url, SEGMENTER, body, label_map="maybe").status_code == 400
