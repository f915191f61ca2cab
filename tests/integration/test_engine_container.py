"""The image's PID 1 (`python -m tsvk_tools.engines.container --engine kserve`, what the chart's engine=kserve and
k8s/kserve's ServingRuntime run) on a real engine: it starts the engine on the config, its output on the container's,
and on SIGTERM every request the engine held is answered before everything it started has exited."""

from __future__ import annotations

import http.client
import select
import signal
import subprocess
import sys
import time
from urllib.parse import urlsplit

import psutil
import pytest
import requests

from tests.support.handler_fakes import encode, photo
from tests.support.torchserve import archive_tiny
from tsvk_tools.engines.kserve.forkserver import FLAG as FORK_SERVER_FLAG
from tsvk_tools.engines.kserve.files import WORKER_MARKER
from tsvk_tools.config.ports import serving_on_free_ports
from tsvk_tools.config.serving_config import write_config

pytestmark = pytest.mark.integration

REQUESTS = 64


def _wait_healthy(url: str, process: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if requests.get(f"{url}/ping", timeout=2).status_code == 200:
                return
        except requests.ConnectionError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"the engine was not healthy (exit {process.poll()})")


def _wait_accepted(pid1: int, port: int, count: int, timeout: float = 30) -> None:
    """Until the engine's server holds `count` accepted connections on its port: taken in, not merely queued by the
    kernel (a connection still in the listen queue when the listener closes was never accepted)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        servers = [p for p in psutil.Process(pid1).children() if "tsvk_tools.engines.kserve" in " ".join(p.cmdline())]
        held = [c for s in servers for c in s.net_connections("tcp") if c.laddr.port == port and c.status == psutil.CONN_ESTABLISHED]
        if len(held) >= count:
            return
        time.sleep(0.01)
    raise AssertionError(f"the engine took in fewer than {count} connections")


def _send(url: str, body: bytes) -> http.client.HTTPConnection:
    """A request written whole on a connection of its own; its answer is read later."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    connection.request("POST", "/predictions/tiny", body=body, headers={"Content-Type": "image/jpeg"})
    return connection


def engine_workers(root: int) -> list[psutil.Process]:
    """The engine's workers below `root`: processes running the worker module, but the fork server, whose command
    line its forked workers share (they are its children; it is the engine server's)."""
    marked = [p for p in psutil.Process(root).children(recursive=True) if WORKER_MARKER in " ".join(p.cmdline())]
    marked_pids = {p.pid for p in marked}
    return [p for p in marked if FORK_SERVER_FLAG not in p.cmdline() or p.ppid() in marked_pids]


def test_pid_1_runs_the_engine_and_a_sigterm_answers_every_request_it_held(tmp_path):
    store = archive_tiny(tmp_path / "store", "SlowTinyNet")  # 40 ms a batch: requests queue up
    request = serving_on_free_ports(model_store=store, vcpus=1, workers=1, batch=4, max_batch_delay_ms=100, auth=False)
    config = tmp_path / "config.properties"
    write_config(request, config)
    pid1 = subprocess.Popen([sys.executable, "-m", "tsvk_tools.engines.container", "--engine", "kserve", "--config", str(config),
                             "--run-dir", str(tmp_path / "run"), "--drain-timeout", "20"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        url = request.inference_address
        _wait_healthy(url, pid1)
        workers = engine_workers(pid1.pid)
        assert len(workers) == 1
        connections = [_send(url, encode(photo("chelsea"))) for _ in range(REQUESTS)]
        _wait_accepted(pid1.pid, urlsplit(url).port, REQUESTS)
        pid1.send_signal(signal.SIGTERM)
        unanswered = REQUESTS - len(select.select([c.sock for c in connections], [], [], 0)[0])
        statuses = [connection.getresponse().status for connection in connections]
        output, _ = pid1.communicate(timeout=60)
    finally:
        if pid1.poll() is None:  # a failed check: PID 1 still stops its engine first, as a pod's stop would
            pid1.send_signal(signal.SIGTERM)
            try:
                pid1.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                pid1.kill()
    assert unanswered > 0, "every request was answered before SIGTERM: the stop was not tried under load"
    assert statuses == [200] * REQUESTS
    assert pid1.returncode == 0, output[-2000:]
    assert "engine kserve started" in output and "the engine answered the requests it held" in output
    assert "serving tiny (1 worker(s))" in output, "the engine's own log is the container's"
    assert not any(worker.is_running() and worker.status() != psutil.STATUS_ZOMBIE for worker in workers)
