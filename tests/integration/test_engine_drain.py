"""Stopping tsvk's own engine under load loses nothing it took in: `tsvk stop` (SIGTERM to the engine's process
group, workers included) and a SIGTERM to the engine's server alone (what a container's init forwards), each at
about 70% of the measured capacity of a model that takes 40 ms a batch (tools/lab/robustness/drain_measure.py, as for
TorchServe in test_drain.py): no connection cut, no 5xx, exit within the drain timeout + 5 s. With the Open Inference
Protocol served, gRPC calls in flight at a SIGTERM are answered too, while new ones are refused."""

from __future__ import annotations

import json
import os
import signal
import time
from argparse import Namespace
from pathlib import Path

import pytest

from tests.fixtures.tiny_model import BATCH_TIME_ENV
from tests.support.drain_setup import DRAIN_TIMEOUT_S, LOAD_SHARE, one_worker_config, slow_tiny_store, small_photo
from tsvk_tools.engines.kserve.engine_process import find_engine, start_engine
from tsvk_tools.lab.robustness.drain_measure import capacity, measure_drain
from tsvk_tools.lab.robustness.grpc_calls import OK, CallsInFlight
from tsvk_tools.engines.serve_cli import cmd_stop
from tsvk_tools.config.ports import free_ports, serving_on_free_ports
from tsvk_tools.config.serving_config import write_config
from tsvk_tools.engines.torchserve.drain import arrivals

pytestmark = pytest.mark.integration

GRPC_CALLS = 4
GRPC_BATCH_S = 1.0  # each call a batch of its own on the one worker: the last is answered 4 s after the first began

@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    return slow_tiny_store(tmp_path_factory.mktemp("store"))


@pytest.fixture
def config(store, tmp_path) -> Path:
    return one_worker_config(store, tmp_path / "config.properties")


def _drain(config: Path, run_dir: Path, stop) -> dict:
    """The engine started, loaded at LOAD_SHARE of its capacity, stopped by `stop(run)` mid-load: the drain's report."""
    run = start_engine(config, run_dir)
    try:
        run.wait_ready(timeout=180)
        url = f"{run.url('inference')}/predictions/tiny"
        rate = LOAD_SHARE * capacity(url, small_photo(), {})
        report = measure_drain(url, small_photo(), rate, lambda: stop(run), gone=lambda: not run.session_alive())
    finally:
        run.stop(drain_timeout=0)
    assert not run.session_alive()
    return report


def _assert_drained(report: dict) -> None:
    said = json.dumps(report)
    assert report["sent_before_stop"] > 50, said
    assert report["lost"] == 0 and report["server_errors"] == 0, said  # lost: cut connections and 5xx included
    assert report["exit_s"] <= DRAIN_TIMEOUT_S + 5, said


def test_tsvk_stop_under_load_answers_every_request_taken_in(config, tmp_path):
    run_dir = tmp_path / "run"
    said = []

    def tsvk_stop(run) -> None:  # `tsvk stop`'s own function, in this process: `tsvk` takes seconds to import here
        said.append(cmd_stop(Namespace(run_dir=run_dir, drain_timeout=DRAIN_TIMEOUT_S)))

    report = _drain(config, run_dir, tsvk_stop)
    _assert_drained(report)
    assert said == [0]
    assert find_engine(run_dir) is None


def test_sigterm_to_the_server_alone_drains_and_ends_its_workers(config, tmp_path):
    def sigterm(run) -> None:
        os.kill(run.pid, signal.SIGTERM)
        run.process.wait(DRAIN_TIMEOUT_S + 5)

    report = _drain(config, tmp_path / "run", sigterm)
    _assert_drained(report)


def test_sigterm_answers_the_grpc_calls_in_flight_and_takes_no_new_one(store, tmp_path, monkeypatch):
    """Open Inference Protocol calls over gRPC (tritonclient), queued on one worker that takes GRPC_BATCH_S a call:
    SIGTERM to the server stops gRPC taking new calls at once, and every call it had taken is answered OK before the
    workers are ended; the server exits within the drain timeout + 5 s."""
    monkeypatch.setenv(BATCH_TIME_ENV, str(GRPC_BATCH_S))  # read by the workers the engine starts
    rest_port, grpc_port = free_ports(2)
    config = tmp_path / "config.properties"
    write_config(serving_on_free_ports(models=("tiny",), model_store=store, vcpus=1, workers=1, batch=1, max_batch_delay_ms=5,
                                       auth=False, protocol="oip", oip_rest_port=rest_port, oip_grpc_port=grpc_port), config)
    run = start_engine(config, tmp_path / "run")
    try:
        run.wait_ready(timeout=180)
        before = arrivals(run.url("metrics"))["tiny"]
        calls = CallsInFlight(f"127.0.0.1:{grpc_port}", "tiny", small_photo(), GRPC_CALLS)
        _until(lambda: arrivals(run.url("metrics"))["tiny"] - before == GRPC_CALLS, "the engine took every call in")
        stopped_at = time.monotonic()
        os.kill(run.pid, signal.SIGTERM)
        _until(lambda: not _live(grpc_port), "a new call refused")
        in_flight_when_refused = GRPC_CALLS - calls.ended()
        outcomes = calls.wait(DRAIN_TIMEOUT_S + 5)
        run.process.wait(DRAIN_TIMEOUT_S + 5)
        exit_s = time.monotonic() - stopped_at
    finally:
        run.stop(drain_timeout=0)
    assert [o.status for o in outcomes] == [OK] * GRPC_CALLS, outcomes
    assert in_flight_when_refused > 0, "every call had been answered before a new one was refused: nothing was in flight"
    assert exit_s <= DRAIN_TIMEOUT_S + 5


def _until(condition, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.02)


def _live(grpc_port: int) -> bool:
    """Whether a new gRPC call (ServerLive) is answered."""
    from tritonclient.grpc import InferenceServerClient
    from tritonclient.utils import InferenceServerException

    client = InferenceServerClient(f"127.0.0.1:{grpc_port}")
    try:
        return client.is_server_live(client_timeout=2)
    except InferenceServerException:
        return False
    finally:
        client.close()
