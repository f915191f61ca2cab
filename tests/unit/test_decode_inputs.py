"""Finding the image bytes in a TorchServe request: raw, multipart, base64, JSON."""

import base64
import json

import pytest

from tsvk.common.errors import BadRequest
from tsvk.request.predictions import image_bytes, looks_like_image

from tests.support.handler_fakes import encode, noise_image

JPEG = encode(noise_image(), "JPEG")
PNG = encode(noise_image(), "PNG")
B64 = base64.b64encode(JPEG)


@pytest.mark.parametrize(
    "request_dict",
    [
        {"data": JPEG},
        {"body": bytearray(JPEG)},
        {"file": JPEG},  # multipart form field under its own name
        {"data": B64},  # base64 as bytes
        {"body": B64.decode()},  # base64 as text
        {"body": B64.decode()[:40] + "\n" + B64.decode()[40:]},  # wrapped base64
        {"body": {"image": B64.decode()}},  # JSON already parsed by TorchServe
        {"body": {"b64": B64.decode()}},
        {"body": json.dumps({"data": B64.decode()}).encode()},  # JSON as bytes
        {"body": "data:image/jpeg;base64," + B64.decode()},  # data URL
        {"body": base64.urlsafe_b64encode(JPEG).decode()},
    ],
)
def test_every_way_a_client_sends_an_image_gives_the_same_bytes(request_dict):
    assert image_bytes(request_dict) == JPEG


def test_multipart_file_field_wins_over_text_fields():
    assert image_bytes({"note": "a caption", "upload": JPEG}) == JPEG


def test_data_key_wins_over_other_fields():
    assert image_bytes({"data": PNG, "other": JPEG}) == PNG


@pytest.mark.parametrize(
    "request_dict, message",
    [
        ({"body": b""}, "empty"),
        ({"data": None}, "no body"),
        ({}, "no body"),
        ({"body": "   "}, "empty"),
        ({"body": "not base64 at all!"}, "not valid base64"),
        ({"body": {"url": "http://x"}}, "image, data, b64"),
        ({"body": "{broken json"}, "does not parse"),
        ({"body": [1, 2]}, "got list"),
    ],
)
def test_unusable_requests_say_what_was_wrong(request_dict, message):
    with pytest.raises(BadRequest, match=message):
        image_bytes(request_dict)


def test_unknown_bytes_are_passed_on_for_the_decoder_to_reject():
    assert image_bytes({"body": b"\x00\x01\x02garbage"}) == b"\x00\x01\x02garbage"


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "GIF", "BMP", "WEBP"])
def test_magic_bytes_are_recognised_for_each_format(fmt):
    assert looks_like_image(encode(noise_image(16, 16), fmt))
    assert not looks_like_image(base64.b64encode(encode(noise_image(16, 16), fmt)))
