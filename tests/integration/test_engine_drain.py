"""Stopping tsvk's own engine under load loses nothing it took in: `tsvk stop` (SIGTERM to the engine's process
group, workers included) and a SIGTERM to the engine's server alone (what a container's init forwards), each at
about 70% of the measured capacity of a model that takes 40 ms a batch (tools/robustness/drain.py, as for
TorchServe in test_drain.py): no connection cut, no 5xx, exit within the drain timeout + 5 s."""

from __future__ import annotations

import io
import json
import os
import signal
from argparse import Namespace
from pathlib import Path

import pytest
from PIL import Image

from tests.support.torchserve import archive_tiny
from tsvk_tools.engines.kserve.run import find_engine, start_engine
from tsvk_tools.robustness.drain import capacity, measure_drain
from tsvk_tools.serve.serve_cli import cmd_stop
from tsvk_tools.serve.ports import serving_on_free_ports
from tsvk_tools.serve.serving_config import write_config

pytestmark = pytest.mark.integration

DRAIN_TIMEOUT_S = 10
LOAD_SHARE = 0.7


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    store = tmp_path_factory.mktemp("store")
    archive_tiny(store, "SlowTinyNet")
    return store


@pytest.fixture
def config(store, tmp_path) -> Path:
    path = tmp_path / "config.properties"
    write_config(serving_on_free_ports(models=("tiny",), model_store=store, vcpus=1, workers=1, batch=4,
                                       max_batch_delay_ms=20, auth=False), path)
    return path


def _photo() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (64, 48), (30, 200, 30)).save(out, "JPEG")
    return out.getvalue()


def _drain(config: Path, run_dir: Path, stop) -> dict:
    """The engine started, loaded at LOAD_SHARE of its capacity, stopped by `stop(run)` mid-load: the drain's report."""
    run = start_engine(config, run_dir)
    try:
        run.wait_ready(timeout=180)
        url = f"{run.url('inference')}/predictions/tiny"
        rate = LOAD_SHARE * capacity(url, _photo(), {})
        report = measure_drain(url, _photo(), rate, lambda: stop(run), gone=lambda: not run.session_alive())
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
