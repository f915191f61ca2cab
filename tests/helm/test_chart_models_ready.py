"""The startup probe script (k8s/tsvk/files/models-ready.py) against a management API stand-in.

The stand-in answers GET /models/<name> with the JSON TorchServe 0.12.0 returns (trimmed to the
fields the script reads); the script itself was also run against a real TorchServe when written.
"""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading

import pytest
from tests.support.helm import CHART

pytestmark = pytest.mark.helm

SCRIPT = CHART / "files" / "models-ready.py"


def describe(name: str, min_workers: int, statuses: list[str]) -> list[dict]:
    workers = [{"id": str(9000 + i), "status": status} for i, status in enumerate(statuses)]
    return [{"modelName": name, "modelVersion": "1.0", "minWorkers": min_workers, "maxWorkers": min_workers, "workers": workers}]


MODELS = {
    "ready": describe("ready", 2, ["READY", "READY"]),
    "starting": describe("starting", 2, ["READY", "UNLOADING"]),
    "no-workers-yet": describe("no-workers-yet", 1, []),
}


class ManagementApi(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        name = self.path.removeprefix("/models/")
        if name not in MODELS:
            self.send_error(404, f"Model not found: {name}")
            return
        body = json.dumps(MODELS[name]).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def management_url():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), ManagementApi)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def probe(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=30, check=False)


def test_ready_when_every_model_has_its_workers(management_url):
    result = probe(management_url, "ready")
    assert result.returncode == 0, result.stderr


def test_not_ready_while_workers_are_missing(management_url):
    result = probe(management_url, "ready", "starting", "no-workers-yet")
    assert result.returncode == 1
    assert "starting: 1 of 2 workers ready" in result.stderr
    assert "no-workers-yet: 0 of 1 workers ready" in result.stderr


def test_not_ready_when_a_model_failed_to_load(management_url):
    result = probe(management_url, "ready", "absent")
    assert result.returncode == 1
    assert "absent: HTTP Error 404" in result.stderr


def test_not_ready_while_torchserve_is_not_listening():
    result = probe("http://127.0.0.1:9", "ready")
    assert result.returncode == 1


def test_usage_without_models():
    assert probe("http://127.0.0.1:8081").returncode == 2
