"""tsvk's own engine against clients that send what a well-written client does not: bodies over max_request_size in
every framing and on any method, Authorization headers of any bytes, broken multipart forms, truncated photos.

Each is answered with a 4xx in tsvk's error shape that says what was wrong, never a 500 and never an exception's
text; the server stays healthy and answers the next good request. The served config has a 1 MiB max_request_size, so
an over-large body is cheap to send. A truncated JPEG is answered the same way by TorchServe running the same handler.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests

from tests.support.engine import running_engine
from tests.support.handler_fakes import encode, photo
from tsvk_tools.lab.robustness.raw_http import send_chunked
from tests.support.torchserve import archive_tiny, running_torchserve
from tsvk_tools.config.ports import serving_on_free_ports

pytestmark = pytest.mark.integration

MODEL = "tiny"
LIMIT_MB = 1
LIMIT = LIMIT_MB * 2**20
# Small enough that the tiny model's preprocessing (resize 40) decodes it whole with torchvision's libjpeg-turbo decoder.
SMALL_PHOTO = (70, 60)
TRUNCATED_MESSAGE = "cannot decode the JPEG image (70x60): the JPEG data is truncated or corrupt"
BOUNDARY = "tsvkboundary"


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    return archive_tiny(tmp_path_factory.mktemp("clients_store") / "model_store")


def _request(store: Path):
    return serving_on_free_ports(model_store=store, vcpus=2, workers=1, batch=1, max_batch_delay_ms=10, auth=True,
                                 max_request_mb=LIMIT_MB)


@pytest.fixture(scope="module")
def engine(store, tmp_path_factory):
    with running_engine(_request(store), tmp_path_factory.mktemp("clients_engine")) as run:
        yield run


def _predict(run, body: bytes, headers: dict | None = None) -> requests.Response:
    return requests.post(f"{run.url('inference')}/predictions/{MODEL}", data=body,
                         headers={**run.headers("inference"), **(headers or {})}, timeout=60)


def _assert_still_serving(run) -> None:
    assert requests.get(f"{run.url('inference')}/ping", headers=run.headers("inference"), timeout=30).status_code == 200
    answer = _predict(run, encode(photo("chelsea")))
    assert answer.status_code == 200 and len(answer.json()) == 3, answer.text


def _assert_no_internals(text: str) -> None:
    """No exception text, traceback or source path in a body a client reads."""
    for leak in ("Traceback", ".py", ".cpp", "/__w/", "Error:", "site-packages"):
        assert leak not in text, (leak, text)


@pytest.mark.parametrize("method", ["POST", "PUT"])
def test_a_chunked_body_over_max_request_size_is_refused_413_as_it_arrives(engine, method):
    answer = send_chunked(engine.url("inference"), method, f"/predictions/{MODEL}", engine.headers("inference"), 4 * LIMIT)
    assert answer.status == 413, (answer.status, answer.body[:300])
    body = json.loads(answer.body)
    assert (body["code"], body["error"], body["source"]) == (413, "request_too_large", "tsvk")
    assert "max_request_size" in body["message"] and answer.headers.get("connection") == "close"
    _assert_still_serving(engine)


def test_a_content_length_over_max_request_size_is_refused_413_in_the_same_shape(engine):
    answer = _predict(engine, b"\xff" * (LIMIT + 1))
    assert answer.status_code == 413 and answer.json()["error"] == "request_too_large", answer.text
    _assert_still_serving(engine)


@pytest.mark.parametrize("authorization", [b"Bearer \xff\xfe", "Bearer ключ".encode(), b"Basic dXNlcjpwYXNz", b"Bearer",
                                           b"Bearer " + b"A" * 4096])
def test_any_authorization_header_without_the_key_is_refused_not_failed(engine, authorization):
    for path in (f"/predictions/{MODEL}", "/ping", f"/v2/models/{MODEL}/ready"):
        answer = requests.post(f"{engine.url('inference')}{path}", data=encode(photo("chelsea")),
                               headers={"Authorization": authorization}, timeout=30)
        assert answer.status_code in (400, 401), (path, answer.status_code, answer.text)
        assert "InvalidKeyException" in answer.text
    _assert_still_serving(engine)


def _form(boundary: str, image: bytes) -> bytes:
    return (f"--{boundary}\r\nContent-Disposition: form-data; name=\"data\"; filename=\"photo.jpg\"\r\n"
            f"Content-Type: image/jpeg\r\n\r\n").encode() + image + f"\r\n--{boundary}--\r\n".encode()


@pytest.mark.parametrize("case", ["no boundary parameter", "another boundary", "truncated", "part without a name",
                                  "not multipart syntax"])
def test_a_malformed_form_is_refused_400_saying_what_is_wrong(engine, case):
    content_type, body, says = _malformed_form(case, encode(photo("chelsea")))
    answer = _predict(engine, body, {"Content-Type": content_type})
    assert answer.status_code == 400, (case, answer.status_code, answer.text)
    error = answer.json()
    assert error["error"] == "bad_request" and says in error["message"], (case, error)
    _assert_no_internals(answer.text)
    good = _predict(engine, _form(BOUNDARY, encode(photo("chelsea"))), {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"})
    assert good.status_code == 200, good.text


def _malformed_form(case: str, image: bytes) -> tuple[str, bytes, str]:
    """(Content-Type, body, what the refusal must say) for each kind of broken form."""
    declared = f"multipart/form-data; boundary={BOUNDARY}"
    if case == "no boundary parameter":
        return "multipart/form-data", _form(BOUNDARY, image), "no boundary parameter"
    if case == "another boundary":
        return declared, _form("someotherboundary", image), "closing boundary"
    if case == "truncated":
        return declared, _form(BOUNDARY, image)[: len(image) // 2], "cut short"
    if case == "part without a name":
        return declared, f"--{BOUNDARY}\r\nContent-Disposition: form-data\r\n\r\nx\r\n--{BOUNDARY}--\r\n".encode(), "no name"
    return declared, f"--{BOUNDARY}junk\r\n\r\n--{BOUNDARY}--\r\n".encode(), "multipart/form-data syntax"


def _truncated_jpeg() -> bytes:
    data = encode(photo("chelsea", SMALL_PHOTO))
    return data[: len(data) // 2]  # the header (and its size) intact: it fails at decode


def test_a_truncated_jpeg_is_answered_in_tsvks_words_without_the_decoders_internals(engine):
    answer = _predict(engine, _truncated_jpeg())
    assert answer.status_code == 400 and answer.json()["error"] == "bad_image", answer.text
    assert answer.json()["message"] == TRUNCATED_MESSAGE
    _assert_no_internals(answer.text)
    worker_logs = "".join(path.read_text() for path in (engine.run_dir / "logs").glob("*.log"))
    assert "truncated" in worker_logs.split("does not decode")[-1]  # the decoder's own words are in the worker's log


def test_torchserve_answers_a_truncated_jpeg_in_the_same_words(store, tmp_path):
    with running_torchserve(_request(store), tmp_path / "torchserve") as torchserve:
        answer = _predict(torchserve, _truncated_jpeg())
    assert answer.status_code == 400 and answer.json()["message"] == TRUNCATED_MESSAGE, answer.text
    _assert_no_internals(answer.text)


def _upload_begun(run, size: int) -> socket.socket:
    """A connection whose request declares `size` bytes of body and has sent only its first KiB."""
    parts = urlsplit(run.url("inference"))
    head = [f"POST /predictions/{MODEL} HTTP/1.1", f"Host: {parts.hostname}:{parts.port}", f"Content-Length: {size}",
            *(f"{name}: {value}" for name, value in run.headers("inference").items())]
    sock = socket.create_connection((parts.hostname, parts.port), timeout=30)
    sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + b"\xff" * 1024)
    return sock


def _first_answer(run, status: int, timeout_s: float = 30) -> requests.Response:
    deadline = time.monotonic() + timeout_s
    while (answer := _predict(run, encode(photo("chelsea")))).status_code != status:
        assert time.monotonic() < deadline, f"no {status} in {timeout_s:.0f} s; the last answer: {answer.status_code} {answer.text}"
        time.sleep(0.05)
    return answer


def test_uploads_past_the_queue_are_refused_503_before_their_bodies_are_read(store, tmp_path):
    """job_queue_size 2: while two uploads are still sending their bodies they hold the queue's places, so a third
    request is answered 503 at once, its body never read (no more bodies are buffered than the queue holds); once the
    two end, the queue takes requests again."""
    with running_engine(_request(store), tmp_path, extra_properties={"job_queue_size": "2"}) as run:
        uploads = [_upload_begun(run, LIMIT - 1) for _ in range(2)]
        refused = _first_answer(run, 503)
        assert "has no worker to serve inference request" in refused.json()["message"], refused.text
        for upload in uploads:
            upload.close()
        _first_answer(run, 200)
