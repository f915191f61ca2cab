"""One hostile request fails alone: whatever reading, parsing or preprocessing it raises, it gets its own
4xx and the good request beside it in the batch is answered as if it were alone. JSON bodies are bounded
(size, depth, values) before they are parsed, in the handler, and TorchServe's own unbounded parse is off."""

from __future__ import annotations

import base64
import json
import os
import struct
import tracemalloc
from pathlib import Path

import pytest

from tsvk.common.errors import JsonTooDeep, JsonTooLarge
from tsvk.request import OIP, read_request
from tsvk.request.json_body import JsonLimits, hand_json_to_the_handler, nesting_depth, parse_json
from tsvk.worker.service import VisionService
from tsvk.tasks.params import number

from tests.support.handler_fakes import FakeContext, encode, noise_image, write_tiny_eager_archive

HANDLERS = Path(__file__).resolve().parents[2] / "handlers"
NESTED = b'{"inputs":' + b"[" * 1000 + b"]" * 1000 + b"}"  # ~2 KB: Python's json raised RecursionError
JSON_BOMB = b"[" + b"[]," * (16 * 2**20 // 3 - 1) + b"[]]"  # 16 MiB: ~385 MiB once parsed by json


@pytest.fixture(scope="module")
def tiny_archive(tmp_path_factory):
    model_dir = tmp_path_factory.mktemp("archive")
    return model_dir, write_tiny_eager_archive(model_dir)


@pytest.fixture
def served(tiny_archive):
    """The classifier service on a fake TorchServe context, and that context."""
    context = FakeContext(*tiny_archive)
    return VisionService.from_context(context), context


def _good(seed=0):
    return encode(noise_image(64, 48, seed=seed), "JPEG")


def _alone(service, context, seed=0):
    return service.handle([{"data": _good(seed)}], context)[0]


def _oip_images(name="images", datatype="BYTES", shape=(1,)):
    return {"inputs": [{"name": name, "datatype": datatype, "shape": list(shape), "data": [base64.b64encode(_good()).decode()]}]}


@pytest.mark.parametrize("hostile, status, code", [
    ({"body": bytearray(NESTED)}, 400, "json_too_deep"),  # as TorchServe hands a JSON body on, unparsed
    ({"body": NESTED.decode()}, 400, "json_too_deep"),
    ({"body": _oip_images(name=["images"])}, 400, "bad_tensor"),  # TypeError: unhashable list
    ({"body": _oip_images(datatype={"BYTES": 1})}, 400, "bad_tensor"),
    ({"body": bytearray(JSON_BOMB)}, 413, "json_too_large"),
    ({"body": b'{"image": "' + b"A" * (17 * 2**20) + b'"}'}, 413, "json_too_large"),
], ids=["nested-bytes", "nested-text", "oip-name-list", "oip-datatype-dict", "values", "size"])
def test_a_hostile_request_fails_alone_and_its_neighbour_is_answered(served, hostile, status, code):
    service, context = served
    answers = service.handle([hostile, {"data": _good(1)}], context)
    assert context.statuses == {0: (status, context.statuses[0][1])} and answers[0]["error"].split(":")[0] == code
    assert answers[1] == _alone(service, context, seed=1)


class _Exploding(dict):
    """A request whose every lookup raises what no check foresaw."""

    def __init__(self, error):
        super().__init__(body=b"x")
        self.error = error

    def get(self, *args):
        raise self.error

    def __getitem__(self, key):
        raise self.error


@pytest.mark.parametrize("error", [RecursionError("deep"), TypeError("unhashable"), KeyError("x"), AttributeError("y")])
def test_read_request_never_raises(error, caplog):
    payload = read_request(_Exploding(error), crop=32)
    assert payload.error.status == 400 and payload.error.message.startswith("cannot read the request")
    assert type(error).__name__ not in payload.error.message and type(error).__name__ in caplog.text  # said in the log only


def test_an_oip_request_failing_in_an_unforeseen_way_is_answered_in_its_protocol(monkeypatch, caplog):
    from tsvk.request import oip

    monkeypatch.setattr(oip, "_oip_image", lambda data: 1 / 0)
    payload = read_request({"body": _oip_images()}, crop=32)
    assert payload.protocol == OIP and payload.error.status == 400 and payload.error.message.startswith("cannot read the request")
    assert "ZeroDivisionError" not in payload.error.message and "ZeroDivisionError" in caplog.text


def test_an_image_whose_preprocessing_raises_fails_alone(served, monkeypatch, caplog):
    """Whatever the transform raises for one image (an extreme shape, say), that request gets a 400 and the
    images beside it are prepared again without it; before, the whole batch was answered 500."""
    service, context = served
    real_prepare = service.task.prepare

    def prepare(images):
        if any(image.width == 7 for image in images):
            raise RuntimeError("cannot allocate 300 GB")
        return real_prepare(images)

    monkeypatch.setattr(service.task, "prepare", prepare)
    answers = service.handle([{"data": _good(2)}, {"data": encode(noise_image(7, 48), "PNG")}, {"data": _good(3)}], context)
    assert context.statuses == {1: (400, "Bad Request")} and answers[1]["error"] == "bad_image"
    assert "7x48 PNG" in answers[1]["message"] and "cannot allocate" not in answers[1]["message"]
    assert "cannot allocate" in caplog.text  # the exception is the worker's log's, not the client's
    assert answers[0] == _alone(service, context, 2) and answers[2] == _alone(service, context, 3)


def test_a_backend_failing_only_on_whole_batches_fails_the_batch_500(served, monkeypatch):
    service, context = served
    real_prepare = service.task.prepare
    monkeypatch.setattr(service.task, "prepare", lambda images: real_prepare(images) if len(images) == 1 else 1 / 0)
    service.handle([{"data": _good(2)}, {"data": _good(3)}], context)
    assert {code for code, _ in context.statuses.values()} == {500} and len(context.statuses) == 2


def test_a_16_mib_json_bomb_is_refused_before_any_object_is_built(served):
    service, context = served
    body = bytearray(JSON_BOMB)
    service.handle([{"data": _good()}], context)  # warm
    tracemalloc.start()
    answers = service.handle([{"body": body}, {"data": _good(1)}], context)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    # the values allowed, and one image of pixels at the crop
    assert answers[0]["error"] == "json_too_large" and f"the limit is {4096 + 3 * 32 * 32}" in answers[0]["message"]
    assert peak < 8 * 2**20, f"{peak / 2**20:.0f} MiB"  # Python's json: ~385 MiB


def test_json_limits_count_values_and_depth_outside_strings():
    assert parse_json(b'{"a": "[[[[[[[[", "b": [1, {"c": "]]]"}]}', JsonLimits(max_depth=3)) == {"a": "[[[[[[[[", "b": [1, {"c": "]]]"}]}
    assert nesting_depth(b'[["\\"]]]", [[]]]]') == 4  # the escaped quote does not end the string
    with pytest.raises(JsonTooDeep, match="nested 5 deep; the limit is 4"):
        parse_json(b'{"x": [[[["\\\\"]]]]}', JsonLimits(max_depth=4))
    with pytest.raises(JsonTooLarge, match="holds up to 6 values; the limit is 5"):
        parse_json(b"[1, 2, 3, 4, 5]", JsonLimits(max_values=5))
    with pytest.raises(JsonTooLarge, match="JSON body is 17 bytes; the limit is 16"):
        parse_json(b'{"image": "aGk="}', JsonLimits(max_bytes=16))
    pixels = {"inputs": [{"name": "pixels", "datatype": "FP32", "shape": [1, 3, 600, 600], "data": [0.5] * (3 * 600 * 600)}]}
    assert read_request(json.dumps(pixels), crop=600).pixels.shape == (3, 600, 600)  # one image always fits
    pixels["extra"] = ["ab"] * 4096
    assert read_request(json.dumps(pixels), crop=600).error.code == "json_too_large"  # and little besides


def test_options_are_read_from_a_json_body_handed_on_as_bytes():
    body = json.dumps({"image": base64.b64encode(_good()).decode(), "score_threshold": 0.3}).encode()
    payload = read_request({"body": bytearray(body)}, crop=32, parameters=("score_threshold",))
    assert payload.image == _good() and number(payload.fields, "score_threshold", 0.5, 0.05, 1.0) == 0.3


class _Socket:
    """The worker's end of TorchServe's socket, holding one input frame as ts/protocol/otf_message_handler.py
    (TorchServe 0.12.0) reads it: name, content type and value, each preceded by its length."""

    def __init__(self, name: bytes, content_type: bytes, value: bytes):
        self.data = b"".join(struct.pack("!i", len(part)) + part for part in (name, content_type, value))

    def recv(self, length):
        chunk, self.data = self.data[:length], self.data[length:]
        return chunk


def test_torchserve_hands_json_bodies_on_unparsed_once_the_handler_is_loaded(tiny_archive, monkeypatch):
    from ts.protocol.otf_message_handler import _retrieve_input_data

    monkeypatch.delenv("TS_DECODE_INPUT_REQUEST", raising=False)
    body = json.dumps({"image": "aGk="}).encode()
    assert _retrieve_input_data(_Socket(b"body", b"application/json", body))["value"] == {"image": "aGk="}
    monkeypatch.syspath_prepend(str(HANDLERS))
    import image_classifier

    image_classifier.ImageClassifier().initialize(FakeContext(*tiny_archive))
    assert os.environ["TS_DECODE_INPUT_REQUEST"] == "false"
    assert _retrieve_input_data(_Socket(b"body", b"application/json", body))["value"] == body


def test_hand_json_to_the_handler_sets_the_variable_torchserve_reads(monkeypatch):
    monkeypatch.setenv("TS_DECODE_INPUT_REQUEST", "true")
    hand_json_to_the_handler()
    assert os.environ["TS_DECODE_INPUT_REQUEST"] == "false"
