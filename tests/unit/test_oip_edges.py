"""The handler's Open Inference Protocol edges: reading a request (request/protocols.py) and writing its answer."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from tests.support.handler_fakes import encode, noise_image
from tsvk.request import oip
from tsvk.common.errors import BadImage, BadTensor
from tsvk.request import OIP, PREDICTIONS, read_request, write_answer, write_error

CROP = 8


def _request(name="images", datatype="BYTES", shape=(1,), data=None, **extra):
    return {"body": {"inputs": [{"name": name, "datatype": datatype, "shape": list(shape), "data": data}], **extra}}


def test_an_encoded_image_in_json_is_read_as_oip():
    jpeg = encode(noise_image(), "JPEG")
    payload = read_request(_request(data=[base64.b64encode(jpeg).decode()], id="r1"), CROP)
    assert payload.protocol == OIP and payload.image == jpeg and payload.error is None and payload.request_id == "r1"


def test_the_same_json_as_raw_bytes_is_read_as_oip_too():
    jpeg = encode(noise_image(), "PNG")
    body = ('{"inputs":[{"name":"images","datatype":"BYTES","shape":[1],"data":["%s"]}]}' % base64.b64encode(jpeg).decode()).encode()
    assert read_request({"body": body}, CROP).image == jpeg


def test_pixels_are_read_as_one_finite_image():
    pixels = np.arange(3 * CROP * CROP, dtype=np.float32)
    payload = read_request(_request("pixels", "FP32", (1, 3, CROP, CROP), pixels.tolist()), CROP)
    assert payload.pixels.shape == (3, CROP, CROP) and np.array_equal(payload.pixels.reshape(-1), pixels)


@pytest.mark.parametrize("request_dict,wanted", [
    (_request("pixels", "FP32", (1, 3, CROP, CROP), [0.0] * 5), "holds 5 values"),
    (_request("pixels", "FP32", (1, 3, CROP, CROP), [float("nan")] * (3 * CROP * CROP)), "finite"),
    (_request("pixels", "FP32", (1, 3, 4, 4), [0.0] * 48), f"shape [N, 3, {CROP}, {CROP}]"),
    (_request("images", "BYTES", (2,), ["a", "b"]), "1 to 1 images"),
    (_request("images", "FP32", (1,), [1.0]), "datatype BYTES"),
    ({"body": {"inputs": []}}, "exactly one tensor"),
], ids=["too-few-values", "nan", "wrong-crop", "two-images-at-the-handler", "wrong-datatype", "no-input"])
def test_bad_tensors_are_refused_with_what_is_allowed(request_dict, wanted):
    payload = read_request(request_dict, CROP)
    assert payload.protocol == OIP and isinstance(payload.error, BadTensor) and wanted in payload.error.message


def test_plain_requests_still_read_as_predictions():
    jpeg = encode(noise_image(), "JPEG")
    assert read_request({"body": jpeg}, CROP).protocol == PREDICTIONS
    assert read_request({"body": {"image": base64.b64encode(jpeg).decode()}}, CROP).image == jpeg
    assert isinstance(read_request({"body": b""}, CROP).error, BadImage)


def test_answers_and_errors_are_written_in_the_request_protocol():
    oip_payload = read_request(_request(data=["eA=="], id="7"), CROP)
    answer = {"cat": 0.7, "dog": 0.2}
    written = write_answer(oip_payload, answer, "tiny")
    outputs = {o["name"]: o for o in written["outputs"]}
    assert written["id"] == "7" and written["model_name"] == "tiny"
    assert outputs[oip.PROBABILITIES] == {"name": "probabilities", "datatype": "FP32", "shape": [1, 2], "data": [0.7, 0.2]}
    assert outputs[oip.LABELS]["data"] == ["cat", "dog"]
    assert write_answer(None, answer, "tiny") == answer
    assert write_error(oip_payload, BadImage("broken")) == {"error": "bad_image: broken"}
    assert write_error(None, BadImage("broken"))["error"] == "bad_image"


def test_check_input_counts_images_within_the_limit():
    assert oip.check_input("images", "BYTES", [3], CROP, max_items=4) == 3
    with pytest.raises(BadTensor, match="1 to 4"):
        oip.check_input("images", "BYTES", [5], CROP, max_items=4)



def test_a_request_is_read_once_its_fields_kept_for_the_task_options():
    """The task reads its answer options from what reading kept, whatever the protocol: nothing reads the body again."""
    jpeg = encode(noise_image(), "JPEG")
    oip_request = _request(data=[base64.b64encode(jpeg).decode()])
    assert read_request(oip_request, CROP).fields == oip_request
    form = {"data": jpeg, "score_threshold": "0.4"}
    assert read_request(form, CROP, ("score_threshold",)).fields == form


def test_a_task_without_top_k_refuses_the_protocol_in_the_protocol():
    jpeg = encode(noise_image(), "JPEG")
    read = read_request(_request(data=[base64.b64encode(jpeg).decode()], id="9"), CROP, task="detect")
    assert read.protocol == OIP and read.image is None and "classifiers only" in read.error.message
    assert write_error(read, read.error) == {"error": f"bad_request: {read.error.message}"}
    assert read_request(_request("pixels", "FP32", (1, 3, 4, 4), [0.0] * 48), CROP, task="detect").error.code == "bad_tensor"
