"""The front's side of TorchServe: its cached health, and each image forwarded as a /predictions body.

Each scenario (tests/support/oip_front_scenarios.py) runs in a process of its own: it imports the KServe
SDK, whose protobuf messages clash with tritonclient's, which other tests load into this process.
"""

from __future__ import annotations

import base64
import multiprocessing

import pytest


def _in_a_process(name: str, *args):
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(_call, (name, args))


def _call(name: str, args: tuple):
    from tests.support import oip_front_scenarios

    return getattr(oip_front_scenarios, name)(*args)


JPEG = b"\xff\xd8raw jpeg bytes"
PNG = b"\x89PNG png bytes"
BAD = b"not an image"


def test_concurrent_askers_share_one_ping_until_it_is_stale():
    seen = _in_a_process("pings_of_twenty_concurrent_askers")
    assert seen == {"all_healthy": True, "first": 1, "total": 2}


def test_an_unreachable_torchserve_is_not_healthy():
    assert _in_a_process("health_of_an_unreachable_torchserve") is False


def test_images_travel_as_they_came_and_answers_become_tensors():
    wrapped = base64.b64encode(JPEG).decode()[:8] + "\n" + base64.b64encode(JPEG).decode()[8:]  # the handler unwraps it
    seen = _in_a_process("forwarded_images", [JPEG, base64.b64encode(PNG).decode(), wrapped])
    assert seen["bodies"] == [("application/octet-stream", JPEG), ("application/octet-stream", PNG),
                              ("application/octet-stream", wrapped.encode())]
    assert seen["shapes"] == {"probabilities": [3, 2], "labels": [3, 2]}
    assert seen["probabilities"] == pytest.approx([0.75, 0.25] * 3) and seen["id"] == "r1"


def test_a_bad_image_fails_the_request_with_the_handler_code_and_which_image():
    assert _in_a_process("failure_of", [b"\xff\xd8fine", BAD]) == {
        "status": 400, "message": "bad_image: image 2 of 2: cannot identify the image"}


def test_torchserve_gone_is_a_503_saying_so():
    failure = _in_a_process("failure_of", [b"\xff\xd8fine"], "http://127.0.0.1:9")
    assert failure["status"] == 503 and failure["message"].startswith("torchserve_unreachable")
