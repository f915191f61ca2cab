"""Run the init container's download script for real: a local HTTP server, curl and sha256sum."""

from __future__ import annotations

import functools
import hashlib
import http.server
import shutil
import subprocess
import threading

import pytest
from tests.support.helm_scenarios import SCENARIOS

pytestmark = pytest.mark.helm

ARCHIVE = b"PK\x03\x04 not really a model archive, but bytes with a checksum"


@pytest.fixture(scope="module")
def fetch_script(render) -> list[str]:
    for tool in ("sh", "curl", "sha256sum"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is needed to run the init container script here")
    fetch = render(SCENARIOS["download"]).pod_spec()["initContainers"][0]
    return fetch["command"]  # ["/bin/sh", "-ec", script, "$0"]


@pytest.fixture(scope="module")
def archive_url(tmp_path_factory):
    served = tmp_path_factory.mktemp("served")
    (served / "resnet50.mar").write_bytes(ARCHIVE)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/resnet50.mar"
    server.shutdown()


def run_fetch(command: list[str], store, *triples: str) -> subprocess.CompletedProcess:
    return subprocess.run([*command, str(store), *triples], capture_output=True, text=True, timeout=60, check=False)


def test_archive_with_the_right_sha256_lands_in_the_store(fetch_script, archive_url, tmp_path):
    result = run_fetch(fetch_script, tmp_path, "resnet50", archive_url, hashlib.sha256(ARCHIVE).hexdigest())
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "resnet50.mar").read_bytes() == ARCHIVE
    assert sorted(p.name for p in tmp_path.iterdir()) == ["resnet50.mar"]


def test_archive_with_a_wrong_sha256_is_refused_and_removed(fetch_script, archive_url, tmp_path):
    result = run_fetch(fetch_script, tmp_path, "resnet50", archive_url, "0" * 64)
    assert result.returncode != 0
    assert "sha256 differs" in result.stderr
    assert list(tmp_path.iterdir()) == [], "nothing unverified may stay in the model store"


def test_archive_already_verified_is_not_downloaded_again(fetch_script, tmp_path):
    (tmp_path / "resnet50.mar").write_bytes(ARCHIVE)
    unreachable = "http://127.0.0.1:9/resnet50.mar"
    result = run_fetch(fetch_script, tmp_path, "resnet50", unreachable, hashlib.sha256(ARCHIVE).hexdigest())
    assert result.returncode == 0, result.stderr
    assert "already present" in result.stdout


def test_a_missing_archive_fails_the_pod(fetch_script, archive_url, tmp_path):
    missing = archive_url.replace("resnet50.mar", "absent.mar")
    result = run_fetch(fetch_script, tmp_path, "absent", missing, "0" * 64)
    assert result.returncode != 0
    assert "download from" in result.stderr
    assert list(tmp_path.iterdir()) == []
