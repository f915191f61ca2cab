"""Per-request answer options: form fields or JSON fields; a bad value is a 400 naming the option."""

from __future__ import annotations

import pytest

from tsvk.common.errors import BadRequest
from tsvk.request.predictions import image_bytes
from tsvk.tasks.params import flag, number, raw_value, whole

PNG = b"\x89PNG\r\n\x1a\n" + b"rest"


def test_options_come_from_form_fields_and_json_bodies():
    assert raw_value({"data": PNG, "score_threshold": bytearray(b" 0.25 ")}, "score_threshold") == "0.25"
    assert raw_value({"body": {"image": "aGk=", "score_threshold": 0.25}}, "score_threshold") == "0.25"
    assert raw_value({"body": PNG}, "score_threshold") is None
    assert number({"body": {"score_threshold": 0.25}}, "score_threshold", 0.5, 0.05, 1.0) == 0.25
    assert number({"body": PNG}, "score_threshold", 0.5, 0.05, 1.0) == 0.5


@pytest.mark.parametrize("value, message", [("high", "from 0.05 to 1"), ("0.01", "from 0.05 to 1"), ("nan", "from 0.05 to 1")])
def test_a_number_out_of_range_is_refused_with_the_range(value, message):
    with pytest.raises(BadRequest, match=f"score_threshold must be a number {message}"):
        number({"score_threshold": value}, "score_threshold", 0.5, 0.05, 1.0)


def test_whole_numbers_and_flags():
    assert whole({"max_detections": "7"}, "max_detections", 100, 1, 1000) == 7
    for bad in ("0", "-3", "2.5", "1001"):
        with pytest.raises(BadRequest, match="max_detections must be a whole number from 1 to 1000"):
            whole({"max_detections": bad}, "max_detections", 100, 1, 1000)
    assert flag({"label_map": "off"}, "label_map", True) is False and flag({}, "label_map", True) is True
    with pytest.raises(BadRequest, match="label_map must be true or false"):
        flag({"label_map": "maybe"}, "label_map", True)


def test_an_option_field_is_never_taken_for_the_image():
    """A form with the option first and the file second: the file is the image."""
    request = {"score_threshold": bytearray(b"0.3"), "file": bytearray(PNG)}
    assert image_bytes(request, ("score_threshold",)) == PNG
