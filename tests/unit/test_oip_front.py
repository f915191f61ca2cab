"""The front's side of TorchServe: its cached health, and each image forwarded as a /predictions body.

Each scenario (tests/support/oip_front_scenarios.py) runs in a process of its own: it imports the KServe
SDK, whose protobuf messages clash with tritonclient's, which other tests load into this process.
"""

from __future__ import annotations

import base64
import json
import multiprocessing
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from tsvk_tools.config.ports import free_ports
from tsvk_tools.lab.robustness.attacks import oip_wrong_type_documents


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


@pytest.mark.parametrize("raw", [b"\x00" * 3, (2**31).to_bytes(4, "little")])
def test_bytes_contents_whose_length_prefix_runs_past_the_data_are_a_bad_tensor(raw):
    """kserve's `deserialize_bytes_tensor` raises struct.error for them: the front turns it into a 400, not a 500."""
    refusal = _in_a_process("refusal_of_bytes_contents", raw)
    assert refusal.startswith("InvalidInput: bad_tensor: input 'images' data does not match its shape"), refusal


def test_torchserve_gone_is_a_503_saying_so():
    failure = _in_a_process("failure_of", [b"\xff\xd8fine"], "http://127.0.0.1:9")
    assert failure["status"] == 503 and failure["message"].startswith("torchserve_unreachable")


@pytest.fixture(scope="module")
def front_url(tmp_path_factory):
    """The real front, over HTTP, beside a fake TorchServe (tests/support/oip_front_scenarios.py)."""
    rest, grpc = free_ports(2)
    code = ("import sys; from tests.support.oip_front_scenarios import serve_front_beside_fake_torchserve as s; "
            "s(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])")
    front = subprocess.Popen([sys.executable, "-c", code, str(rest), str(grpc), str(tmp_path_factory.mktemp("front"))])
    url = f"http://127.0.0.1:{rest}"
    try:
        deadline = time.monotonic() + 60
        while _post(f"{url}/v2/health/ready", None, {})[0] != 200:
            assert front.poll() is None and time.monotonic() < deadline, "the front did not come up"
            time.sleep(0.3)
        yield url
    finally:
        front.terminate()
        front.wait(30)


def _post(url: str, body: bytes | None, headers: dict[str, str]) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")
    except (urllib.error.URLError, OSError):
        return 0, {}


def _binary_request(element: bytes, claimed_length: int) -> tuple[bytes, bytes]:
    """(JSON header, whole body) of one BYTES element in the binary extension, its length prefix `claimed_length`."""
    tensor = claimed_length.to_bytes(4, "little") + element
    header = json.dumps({"inputs": [{"name": "images", "shape": [1], "datatype": "BYTES",
                                     "parameters": {"binary_data_size": len(tensor)}}]}).encode()
    return header, header + tensor


BINARY_HEADER, BINARY_BODY = _binary_request(JPEG, len(JPEG))


@pytest.mark.parametrize("length", ["abc", "-5", "0", str(len(BINARY_BODY) + 1), "1e3", "9" * 5000, " "])
def test_a_malformed_binary_header_length_is_a_400_saying_what_is_allowed(front_url, length):
    status, body = _post(f"{front_url}/v2/models/tiny/infer", BINARY_BODY,
                         {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": length})
    assert status == 400
    assert "Inference-Header-Content-Length must be a whole number of bytes" in body["error"]


def test_a_well_formed_binary_request_still_reaches_torchserve(front_url):
    status, body = _post(f"{front_url}/v2/models/tiny/infer", BINARY_BODY,
                         {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(len(BINARY_HEADER))})
    assert status == 200 and body["model_name"] == "tiny"


def test_a_bytes_element_longer_than_its_tensor_is_a_400(front_url):
    header, body = _binary_request(JPEG, len(JPEG) + 100)
    status, answer = _post(f"{front_url}/v2/models/tiny/infer", body,
                           {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(len(header))})
    assert status == 400 and "length prefixes" in answer["error"]


def _wrong_type_documents():
    small = 2**20  # larger ones meet the front's request-size limit first (its own tests)
    return [body for body in map(str.encode, map(json.dumps, oip_wrong_type_documents(JPEG))) if len(body) < small]


@pytest.mark.parametrize("document", _wrong_type_documents(), ids=lambda body: body[:60].decode(errors="replace"))
def test_an_oip_document_of_wrong_types_is_a_4xx_at_the_front(front_url, document):
    status, _ = _post(f"{front_url}/v2/models/tiny/infer", document, {"Content-Type": "application/json"})
    assert 400 <= status < 500 or status == 200, (status, document[:300])
