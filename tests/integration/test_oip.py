"""The Open Inference Protocol end to end: `tsvk config --protocol oip` + `tsvk serve` (a real TorchServe and
the front), called by tritonclient (HTTP, gRPC) and the KServe SDK's REST and gRPC clients.

Every client: health, readiness, infer with encoded images (several per request, each answered), infer
with pixels preprocessed by the client (the same answer as the image), a bad image inside a multi-image
request, a wrong datatype and a wrong shape, an unknown model, a missing token. tritonclient also reads
server and model metadata (the KServe clients have no metadata calls). The model is the tiny fixture
network with three labels, token authorization on.
"""

from __future__ import annotations


import numpy as np
import pytest
import requests
import torch

from tests.integration.test_handler_torchserve import LABELS, MODEL, _batch_sizes_seen, build_mar
from tests.support.handler_fakes import encode, noise_image
from tests.support.oip_clients import CLIENTS, EXPECTED, CallFailed, KServeWorker
from tsvk.preprocess.decode import probe
from tsvk.preprocess import build_preprocessor
from tsvk_tools.archive.archive_info import read_archive_settings
from tsvk_tools.cli import main as tsvk
from tsvk_tools.oip.config import read_front_config
from tsvk_tools.oip.process import front_pid, front_urls
from tsvk_tools.config.ports import free_ports
from tsvk_tools.engines.torchserve.server import find_running

pytestmark = pytest.mark.integration

CROP = 32
MAX_BATCH = 4


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """tsvk config --protocol oip, tsvk serve (TorchServe + front), always tsvk stop."""
    work = tmp_path_factory.mktemp("oip")
    build_mar(work / "model_store")
    config, run_dir = work / "oip.properties", work / "run"
    ports = free_ports(7)
    assert tsvk(["config", "--protocol", "oip", "--model-store", str(work / "model_store"), "--vcpus", "1", "--batch", str(MAX_BATCH),
                 "--max-batch-delay", "200", "--inference-address", f"http://127.0.0.1:{ports[0]}",
                 "--management-address", f"http://127.0.0.1:{ports[1]}", "--metrics-address", f"http://127.0.0.1:{ports[2]}",
                 "--grpc-inference-port", str(ports[3]), "--grpc-management-port", str(ports[4]),
                 "--oip-rest-port", str(ports[5]), "--oip-grpc-port", str(ports[6]), "--output", str(config)]) == 0
    try:
        assert tsvk(["serve", "--config", str(config), "--run-dir", str(run_dir)]) == 0
        run = find_running(run_dir)
        rest, grpc = front_urls(read_front_config(config))
        yield run, rest, grpc, work / "model_store" / f"{MODEL}.mar"
    finally:
        KServeWorker.stop()
        tsvk(["stop", "--run-dir", str(run_dir)])
    assert front_pid(run_dir) is None, "tsvk stop left the front running"


@pytest.fixture(params=CLIENTS, ids=lambda c: c.name)
def client(request, served):
    _, rest, grpc, _ = served
    return request.param(rest, grpc)


def _auth(served) -> dict[str, str]:
    return served[0].headers("inference")


def _images(*seeds: int) -> np.ndarray:
    return np.array([encode(noise_image(seed=s), "JPEG") for s in seeds], dtype=np.object_)


def _labels(values: np.ndarray) -> list[list[str]]:
    return [[v.decode() if isinstance(v, bytes) else str(v) for v in row] for row in values]


def _expect_failure(kind: str, client, call) -> CallFailed:
    with pytest.raises(CallFailed) as failure:
        call()
    assert failure.value.status == EXPECTED[kind][client.transport], failure.value
    return failure.value


def test_health_and_readiness(client):
    assert client.live() and client.ready() and client.model_ready(MODEL)


def test_encoded_images_each_answered_in_order(client, served):
    probabilities, labels = client.infer(MODEL, "images", "BYTES", _images(1, 2, 3), _auth(served))
    assert probabilities.dtype == np.float32 and probabilities.shape == (3, 3) and labels.shape == (3, 3)
    assert all(set(row) == LABELS for row in _labels(labels))
    assert np.all(np.diff(probabilities, axis=1) <= 0), "top-k must be highest first"
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)  # three classes: top-3 is all of them
    single, _ = client.infer(MODEL, "images", "BYTES", _images(2), _auth(served))
    np.testing.assert_allclose(single[0], probabilities[1], atol=1e-6)  # the second image's own answer, in its place


def test_preprocessed_pixels_get_the_same_answer_as_the_image(client, served):
    settings = read_archive_settings(served[3])
    preprocessor, _ = build_preprocessor(settings.preprocess, torch.device("cpu"))
    images = _images(4, 5)
    pixels = preprocessor([probe(bytes(i), settings.preprocess.max_pixels) for i in images]).batch.numpy().astype(np.float32)
    from_pixels, labels = client.infer(MODEL, "pixels", "FP32", pixels, _auth(served))
    from_images, _ = client.infer(MODEL, "images", "BYTES", images, _auth(served))
    assert from_pixels.shape == (2, 3) and all(set(row) == LABELS for row in _labels(labels))
    np.testing.assert_allclose(from_pixels, from_images, atol=1e-5)
    assert not np.allclose(from_pixels[0], from_pixels[1], atol=1e-6), "two images, two answers"


def test_a_bad_image_inside_a_multi_image_request(client, served):
    images = np.array([encode(noise_image(seed=6), "JPEG"), b"definitely not an image", encode(noise_image(seed=7), "PNG")],
                      dtype=np.object_)
    failure = _expect_failure("invalid", client, lambda: client.infer(MODEL, "images", "BYTES", images, _auth(served)))
    assert "bad_image" in failure.message and "image 2 of 3" in failure.message, failure.message


@pytest.mark.parametrize("name,datatype,values,wanted", [
    ("images", "INT32", np.zeros((2,), dtype=np.int32), "datatype BYTES"),
    ("pixels", "FP32", np.zeros((1, 3, CROP // 2, CROP // 2), dtype=np.float32), f"shape [N, 3, {CROP}, {CROP}]"),
    ("pixels", "FP64", np.zeros((1, 3, CROP, CROP), dtype=np.float64), "datatype FP32"),
    ("logits", "FP32", np.zeros((1, 3), dtype=np.float32), "'images' (BYTES"),
], ids=["images-int32", "pixels-wrong-crop", "pixels-fp64", "unknown-input"])
def test_wrong_datatype_shape_or_name_is_invalid_argument(client, served, name, datatype, values, wanted):
    failure = _expect_failure("invalid", client, lambda: client.infer(MODEL, name, datatype, values, _auth(served)))
    assert "bad_tensor" in failure.message and wanted in failure.message, failure.message


def test_unknown_model_is_not_found(client, served):
    _expect_failure("not_found", client, lambda: client.infer("no_such_model", "images", "BYTES", _images(1), _auth(served)))


def test_inference_needs_the_token(client, served):
    failure = _expect_failure("unauthenticated", client, lambda: client.infer(MODEL, "images", "BYTES", _images(1), {}))
    assert "InvalidKeyException" in failure.message


@pytest.mark.parametrize("client_class", [c for c in CLIENTS if hasattr(c, "metadata")], ids=lambda c: c.name)
def test_metadata_states_the_archive_tensors(client_class, served):
    client = client_class(served[1], served[2])
    metadata = client.metadata(MODEL)
    tensors = {t["name"]: (t["datatype"], [int(d) for d in t["shape"]]) for t in metadata["inputs"] + metadata["outputs"]}
    assert tensors == {"images": ("BYTES", [-1]), "pixels": ("FP32", [-1, 3, CROP, CROP]),
                       "probabilities": ("FP32", [-1, 3]), "labels": ("BYTES", [-1, 3])}
    assert client.server_metadata()["name"] == "tsvk"


def test_a_multi_image_request_is_batched_by_torchserve(served):
    from tests.support.oip_clients import TritonHTTP

    TritonHTTP(served[1], served[2]).infer(MODEL, "images", "BYTES", _images(*range(10, 10 + MAX_BATCH)), _auth(served))
    assert MAX_BATCH in _batch_sizes_seen(served[0].run_dir), "the images of one request did not share a batch"


def test_front_serves_only_the_protocol_and_bounds_bodies(served):
    rest = served[1]
    assert requests.get(f"{rest}/v2/models/{MODEL}/ready", timeout=10).status_code == 200
    for path in ("/v1/models", "/docs", f"/v2/repository/models/{MODEL}/unload", "/metrics"):
        response = requests.post(rest + path, data=b"{}", timeout=10)
        assert response.status_code == 404 and "error" in response.json(), (path, response.text)
    over_the_limit = read_front_config(served[0].config).max_request_bytes + 2**20  # max_request_size, and a MiB more
    too_big = requests.post(f"{rest}/v2/models/{MODEL}/infer", data=b"x" * over_the_limit, timeout=30)
    assert too_big.status_code == 413 and "request_too_large" in too_big.json()["error"]


def test_predictions_still_answer_as_before(served):
    run = served[0]
    response = requests.post(f"{run.url('inference')}/predictions/{MODEL}", data=encode(noise_image(seed=9), "JPEG"),
                             headers=run.headers("inference"), timeout=60)
    assert response.status_code == 200 and set(response.json()) == LABELS


@pytest.mark.parametrize("protocol", ["oip-rest", "oip-grpc", "predictions"])
def test_tsvk_predict_over_each_protocol(served, protocol, tmp_path, capsys):
    image = tmp_path / "photo.png"
    image.write_bytes(encode(noise_image(seed=11), "PNG"))
    assert tsvk(["predict", "--protocol", protocol, "--image", str(image), "--model", MODEL, "--run-dir", str(served[0].run_dir)]) == 0
    import json

    answer = json.loads(capsys.readouterr().out)
    assert set(answer) == LABELS and abs(sum(answer.values()) - 1) < 1e-5


def test_plain_json_with_base64_images_and_no_id(served):
    """What curl sends (docs/oip.md): JSON only, base64 text, no request id."""
    import base64

    body = {"inputs": [{"name": "images", "datatype": "BYTES", "shape": [2],
                        "data": [base64.b64encode(bytes(image)).decode() for image in _images(12, 13)]}]}
    response = requests.post(f"{served[1]}/v2/models/{MODEL}/infer", json=body, headers=_auth(served), timeout=60)
    assert response.status_code == 200, response.text
    outputs = {o["name"]: o for o in response.json()["outputs"]}
    assert outputs["probabilities"]["shape"] == [2, 3] and set(outputs["labels"]["data"][:3]) == LABELS
