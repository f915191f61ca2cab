"""tsvk's own engine against clients that send what a well-written client does not: Authorization headers of any
bytes. Each is answered with a 4xx, never a 500; the server stays healthy and answers the next good request.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import requests

from tests.support.engine import running_engine
from tests.support.handler_fakes import encode, photo
from tests.support.torchserve import archive_tiny
from tsvk_tools.serve.ports import serving_on_free_ports

pytestmark = pytest.mark.integration

MODEL = "tiny"
LIMIT_MB = 1
LIMIT = LIMIT_MB * 2**20


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


@pytest.mark.parametrize("authorization", [b"Bearer \xff\xfe", "Bearer ключ".encode(), b"Basic dXNlcjpwYXNz", b"Bearer",
                                           b"Bearer " + b"A" * 4096])
def test_any_authorization_header_without_the_key_is_refused_not_failed(engine, authorization):
    for path in (f"/predictions/{MODEL}", "/ping", f"/v2/models/{MODEL}/ready"):
        answer = requests.post(f"{engine.url('inference')}{path}", data=encode(photo("chelsea")),
                               headers={"Authorization": authorization}, timeout=30)
        assert answer.status_code in (400, 401), (path, answer.status_code, answer.text)
        assert "InvalidKeyException" in answer.text
    _assert_still_serving(engine)
