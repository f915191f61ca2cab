"""A worker of tsvk's engine that answers its batch with a broken or short message on the worker channel
(tools/engines/kserve/wire.py, pool.py): every request of the batch is answered 503 `worker_died` at once (long
before the response timeout), the worker is ended by its pid and replaced as after a crash, the engine's log says so
in one line, no request is left waiting, and the next requests are answered 200 by the new worker.

The worker misbehaves for real: the archive's model (tests/fixtures/wire_fault_model.py) breaks the answer of a batch
holding a request that names a fault, with FAULTS_ENV set for the engine's workers.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
import requests

from tests.fixtures.wire_fault_model import FAULT_PREFIX, FAULTS, FAULTS_ENV
from tests.support.engine import running_engine
from tests.support.handler_fakes import encode, photo
from tests.support.torchserve import FIXTURES, archive_tiny
from tsvk_tools.engines.kserve.files import STATUS_FILE
from tsvk_tools.config.ports import serving_on_free_ports

pytestmark = pytest.mark.integration

MODEL = "tiny"
BATCH = 3  # the faulty request and two good ones: one batch, closed as it fills
BATCH_DELAY_MS = 5000  # long enough that the three sent at once always share it
ANSWER_S = 20.0  # every request is answered within this: far below the response timeout a hung read would wait for
REPLACED_S = 120.0  # the new worker has loaded the archive within this
GONE_FAULTS = ("cut_and_closed",)  # the worker's end closed: it is gone, not broken


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    """The fault archive served by one worker taking batches of BATCH, with the default 120 s response timeout."""
    work = tmp_path_factory.mktemp("worker_faults")
    store = archive_tiny(work / "store", "WireFaultTinyNet", model_file=FIXTURES / "wire_fault_model.py")
    request = serving_on_free_ports(model_store=store, vcpus=1, workers=1, batch=BATCH,
                                   max_batch_delay_ms=BATCH_DELAY_MS, auth=False)
    with pytest.MonkeyPatch.context() as env:
        env.setenv(FAULTS_ENV, "1")  # read by the workers the engine starts (they inherit its environment)
        with running_engine(request, work / "engine") as run:
            yield run


def _model_status(engine) -> dict:
    return json.loads((engine.run_dir / STATUS_FILE).read_text())["models"][0]


def _send_together(url: str, bodies: list[bytes]) -> list[requests.Response | Exception]:
    """Each body on a connection of its own, all at once; what each got (an exception: no answer)."""
    got: list[requests.Response | Exception] = [RuntimeError("not sent")] * len(bodies)

    def send(index: int) -> None:
        try:
            got[index] = requests.post(url, data=bodies[index], timeout=ANSWER_S)
        except requests.RequestException as err:
            got[index] = err

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(bodies))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return got


def _replaced(engine, old_pid: int, deaths: int) -> dict:
    """The model's status once its worker is a new, READY process and one more death is counted."""
    deadline = time.monotonic() + REPLACED_S
    while time.monotonic() < deadline:
        status = _model_status(engine)
        worker = status["workers"][0]
        if worker["pid"] != old_pid and worker["status"] == "READY" and status["deaths"] == deaths + 1:
            return status
        time.sleep(0.1)
    raise AssertionError(f"worker {old_pid} not replaced within {REPLACED_S} s: {_model_status(engine)}")


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_broken_answer_is_answered_503_its_worker_replaced_and_the_next_answered_200(engine, fault):
    url = f"{engine.url('inference')}/predictions/{MODEL}"
    before = _model_status(engine)
    old_pid = before["workers"][0]["pid"]
    good = encode(photo("chelsea"))

    answers = _send_together(url, [FAULT_PREFIX + fault.encode(), *[good] * (BATCH - 1)])

    assert all(isinstance(r, requests.Response) for r in answers), f"a request of the batch got no answer: {answers}"
    for answer in answers:
        assert answer.status_code == 503, answer.text
        body = answer.json()
        assert (body["code"], body["type"], body["error"], body["source"]) == (503, "ServiceUnavailable", "worker_died", "tsvk")
        assert "send it again" in body["message"] and "pickle" not in answer.text and "Error" not in answer.text
    _replaced(engine, old_pid, before["deaths"])
    assert not _running(old_pid)
    said = [line for line in engine.stdout_since_start().splitlines() if f"(pid {old_pid})" in line and "answering 503" in line]
    what = "is gone with" if fault in GONE_FAULTS else "sent a broken answer to"
    assert len(said) == 1 and f"{what} a batch of {BATCH}" in said[0], said
    assert [getattr(r, "status_code", r) for r in _send_together(url, [good] * BATCH)] == [200] * BATCH
