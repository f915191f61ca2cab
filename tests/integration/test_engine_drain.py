"""Stopping tsvk's own engine under load loses nothing it took in: `tsvk stop` (SIGTERM to the engine's process
group, workers included) and a SIGTERM to the engine's server alone (what a container's init forwards), each at
about 70% of the measured capacity of a model that takes 40 ms a batch (tools/lab/robustness/drain_measure.py, as for
TorchServe in test_drain.py): no connection cut, no 5xx, exit within the drain timeout + 5 s."""

from __future__ import annotations

import json
import os
import signal
from argparse import Namespace
from pathlib import Path

import pytest

from tests.support.drain_setup import DRAIN_TIMEOUT_S, LOAD_SHARE, one_worker_config, slow_tiny_store, small_photo
from tsvk_tools.engines.kserve.engine_process import find_engine, start_engine
from tsvk_tools.lab.robustness.drain_measure import capacity, measure_drain
from tsvk_tools.engines.serve_cli import cmd_stop

pytestmark = pytest.mark.integration

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
