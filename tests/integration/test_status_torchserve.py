"""`tsvk status` against a real TorchServe: models, workers and their states, ports, key file, memory, uptime."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.torchserve import running_torchserve, archive_tiny
from tsvk_tools.cli import main as tsvk
from tsvk_tools.config.ports import serving_on_free_ports


@pytest.fixture(scope="module")
def tiny_store(tmp_path_factory) -> Path:
    store = tmp_path_factory.mktemp("status-store")
    archive_tiny(store, "TinyNet")
    return store


def test_status_reports_the_running_torchserve(tiny_store, tmp_path, capsys):
    request = serving_on_free_ports(model_store=tiny_store, vcpus=2, workers=2, batch=4)
    with running_torchserve(request, tmp_path) as run:
        capsys.readouterr()
        assert tsvk(["status", "--run-dir", str(run.run_dir), "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert tsvk(["status", "--run-dir", str(run.run_dir)]) == 0
        text = capsys.readouterr().out
    assert report["running"] and report["pid"] == run.pid and report["uptime_s"] > 0
    assert report["addresses"]["management"] == request.management_address
    assert report["addresses"]["grpc_inference_port"] == request.grpc_inference_port
    assert report["key_file"]["owner_only"], report["key_file"]
    assert report["memory_mb"]["workers"] > 0 and report["memory_mb"]["frontend"] > 0
    [model] = report["models"]
    assert (model["name"], model["batch_size"], model["min_workers"], model["ready"]) == ("tiny", 4, 2, True)
    assert [w["status"] for w in model["workers"]] == ["READY", "READY"]
    assert report["oip_front"] is None
    assert "model tiny: ready, batch 4" in text and f"pid {run.pid}" in text
    assert tsvk(["status", "--run-dir", str(run.run_dir)]) == 0
    assert "no server started by `tsvk serve` is running" in capsys.readouterr().out
