"""Stopping under load loses nothing that was taken in, with a real TorchServe and a model that takes 40 ms a
batch: `tsvk stop` and a SIGTERM to the container entrypoint drain at about 70% of the measured capacity
(tools/lab/robustness/drain_measure.py) without cutting a connection, well before the drain timeout; a client that keeps
its connection open gets an answer to every request, the stop's 503 at worst; and `tsvk serve` interrupted
during its readiness check leaves nothing running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import requests

from tests.fixtures.tiny_model import LOAD_DELAY_ENV
from tests.support.torchserve import isolated_env
from tests.support.drain_setup import DRAIN_TIMEOUT_S, LOAD_SHARE, one_worker_config, slow_tiny_store, small_photo
from tsvk_tools.engines.shared.drain import describe_drain
from tsvk_tools.lab.robustness.drain_measure import capacity, measure_drain
from tsvk_tools.engines.torchserve.server import find_running, start_torchserve

pytestmark = pytest.mark.integration
# Python started with SIGINT ignored keeps it ignored; one that handles SIGINT passes it on as SIG_DFL across exec, and
# the Python it becomes then raises KeyboardInterrupt on Ctrl-C. argv after the code is the command to become.
SIGINT_THEN_EXEC = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
                    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])")


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    return slow_tiny_store(tmp_path_factory.mktemp("store"))


@pytest.fixture
def config(store, tmp_path) -> Path:
    return one_worker_config(store, tmp_path / "config.properties")



def _url(run) -> str:
    return f"{run.url('inference')}/predictions/tiny"


def _assert_drained(report: dict, said: str) -> None:
    assert report["sent_before_stop"] > 50 and report["lost"] == 0, report  # lost: cut connections and 5xx included
    assert report["server_errors"] == 0, report
    assert report["exit_s"] <= DRAIN_TIMEOUT_S + 5, report
    # the drain found TorchServe idle before its timeout: it did not depend on a lull in the load
    assert "every request it had taken in was answered first" in said, said


def test_tsvk_stop_under_load_answers_every_request_taken_in(config, tmp_path):
    run = start_torchserve(config, tmp_path / "run", env=isolated_env())
    try:
        run.wait_ready(timeout=180)
        rate = LOAD_SHARE * capacity(_url(run), small_photo(), {})
        stops = []

        def tsvk_stop() -> None:  # what `tsvk stop` runs, in this process: `tsvk` takes seconds to import here
            stops.append(find_running(run.run_dir).stop(drain_timeout=DRAIN_TIMEOUT_S))

        report = measure_drain(_url(run), small_photo(), rate, tsvk_stop, gone=lambda: not run.session_alive())
    finally:
        run.stop(drain_timeout=0)
    _assert_drained(report, describe_drain(stops[0]))
    assert not run.session_alive()


def test_sigterm_to_the_container_entrypoint_drains_reaps_and_exits_0(config, tmp_path):
    init = subprocess.Popen([sys.executable, "-m", "tsvk_tools.cli", "run-container", "--config", str(config), "--run-dir",
                             str(tmp_path / "run"), "--drain-timeout", str(DRAIN_TIMEOUT_S)], start_new_session=True,
                            stdout=subprocess.PIPE, text=True)
    try:
        run = _wait_for(lambda: find_running(tmp_path / "run"), 60)
        run.wait_ready(timeout=180)
        rate = LOAD_SHARE * capacity(_url(run), small_photo(), {})
        report = measure_drain(_url(run), small_photo(), rate, lambda: (init.send_signal(signal.SIGTERM), init.wait(60)),
                               gone=lambda: init.poll() is not None)
    finally:
        if init.poll() is None:
            os.killpg(init.pid, signal.SIGKILL)
            init.wait()
    _assert_drained(report, init.stdout.read())
    assert init.returncode == 0
    assert not [p for p in psutil.process_iter() if _in_group(p, init.pid)], "the entrypoint left processes behind"


def test_a_kept_alive_connection_gets_an_answer_to_every_request_and_new_connections_are_refused(config, tmp_path):
    run = start_torchserve(config, tmp_path / "run", env=isolated_env())
    statuses, errors, done = [], [], threading.Event()
    try:
        run.wait_ready(timeout=180)

        def keep_sending() -> None:
            with requests.Session() as session:
                while not done.is_set():
                    try:
                        response = session.post(_url(run), data=small_photo(), timeout=30)
                    except requests.RequestException as err:
                        errors.append(err)
                        return
                    statuses.append((response.status_code, response.json().get("error") if response.status_code != 200 else None))

        senders = [threading.Thread(target=keep_sending) for _ in range(4)]
        for sender in senders:
            sender.start()
        time.sleep(2)
        stopper = threading.Thread(target=run.stop, kwargs={"drain_timeout": DRAIN_TIMEOUT_S})
        stopper.start()
        time.sleep(0.5)
        with pytest.raises(requests.ConnectionError, match="refused"):
            requests.post(_url(run), data=small_photo(), headers={"Connection": "close"}, timeout=30)
        stopper.join(60)
    finally:
        done.set()
        run.stop(drain_timeout=0)
    refusals = [s for s in statuses if s[0] == 503]
    assert statuses.count((200, None)) > 20 and refusals, statuses[-10:]
    assert set(statuses) <= {(200, None), (503, "server_stopping")}, set(statuses)
    # each sender's connection ends when TorchServe closes it after the stop: by then it had nothing in flight
    assert len(errors) <= 4


def test_serve_interrupted_while_waiting_for_readiness_leaves_nothing_running(config, tmp_path):
    # The workers take 20 s to load the model (SlowTinyNet's load delay), so the Ctrl-C surely comes while
    # `tsvk serve` is still waiting for readiness; stopping may wait for a worker to finish loading.
    env = {**os.environ, LOAD_DELAY_ENV: "20"}
    run_dir = tmp_path / "run"
    # A shell starts background jobs with SIGINT ignored, and Python then never raises KeyboardInterrupt:
    # `tsvk serve` gets Ctrl-C as it does in a terminal, whatever started this test. No preexec_fn: that makes
    # subprocess fork() this process, whose gRPC threads then run gRPC's fork handlers (an abort, now and then).
    serve = subprocess.Popen([sys.executable, "-c", SIGINT_THEN_EXEC, "-m", "tsvk_tools.cli", "serve", "--config", str(config),
                              "--run-dir", str(run_dir)], env=env)
    run = _wait_for(lambda: find_running(run_dir), 60)
    assert run is not None, "tsvk serve never started TorchServe"
    serve.send_signal(signal.SIGINT)  # Ctrl-C while the workers are still loading
    started = time.monotonic()
    assert serve.wait(120) != 0, "tsvk serve exited 0: the Ctrl-C was not taken as one"
    print(f"tsvk serve exited {time.monotonic() - started:.1f} s after the Ctrl-C")
    assert _wait_for(lambda: not run.session_alive(), 30), "TorchServe kept running after tsvk serve was interrupted"


def _wait_for(check, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    return None


def _in_group(process: psutil.Process, group: int) -> bool:
    try:
        return os.getpgid(process.pid) == group and process.status() != psutil.STATUS_ZOMBIE
    except (OSError, psutil.Error):
        return False
