"""A worker that hangs while loading its archive is ended after the model's startup timeout, and its model is refused
with one line saying so (tools/engines/kserve/pool.py); the engine does not wait for it forever. The worker here is a
real worker process (spawned, no fork server) on an archive whose tsvk handler never finishes importing."""

from __future__ import annotations

import asyncio
import json
import os
import zipfile
from pathlib import Path

import yaml

from tsvk_tools.engines.shared.archives import open_archives
from tsvk_tools.engines.kserve.pool import ModelPool, WorkerStart

HANGS = b"import time\ntime.sleep(3600)\n"


def _hanging_archive(path: Path) -> None:
    artifact = {"file": "model.pt", "format": "torchscript", "source": {"builder": "resnet18"}}
    settings = {"tsvk": {"model_name": path.stem, "artifact": artifact}}
    manifest = {"runtime": "python", "model": {"modelName": path.stem, "handler": "handler_file.py", "modelVersion": "1.0"}}
    files = {"MAR-INF/MANIFEST.json": json.dumps(manifest).encode(), "model-config.yaml": yaml.safe_dump(settings).encode(),
             "model.pt": b"weights", "handler_file.py": b"from tsvk.handler import TorchServeHandler\n", "tsvk/__init__.py": b"",
             "tsvk/handler.py": HANGS, "tsvk/worker/__init__.py": b"", "tsvk/worker/service.py": b""}
    with zipfile.ZipFile(path, "w") as mar:
        for name, data in files.items():
            mar.writestr(name, data)


def _model(tmp_path: Path, properties: dict[str, str], entry: dict):
    _hanging_archive(tmp_path / "hangs.mar")
    models = {"hangs": {"1.0": {"marName": "hangs.mar", **entry}}}
    served, refused = open_archives({"model_store": str(tmp_path), "models": json.dumps(models), **properties}, tmp_path / "run")
    assert refused == []
    return served[0]


def test_the_startup_timeout_is_the_models_else_the_configs_else_torchserves(tmp_path):
    assert _model(tmp_path, {}, {}).startup_timeout_s == 120
    assert _model(tmp_path, {"default_startup_timeout": "30"}, {}).startup_timeout_s == 30
    assert _model(tmp_path, {"default_startup_timeout": "30"}, {"startupTimeout": 7}).startup_timeout_s == 7


def test_a_worker_that_hangs_while_loading_is_ended_after_the_startup_timeout_and_its_model_refused(tmp_path):
    model = _model(tmp_path, {}, {"startupTimeout": 3})
    config = tmp_path / "config.properties"
    config.write_text("")
    pool = ModelPool(model, WorkerStart(config, tmp_path / "worker.log", dict(os.environ)))

    async def start() -> tuple[str | None, bool]:
        try:
            return await asyncio.wait_for(pool.start(), 60), pool.workers[0].handle.alive()  # not forever: fails here
        finally:
            await pool.workers[0].kill()

    reason, alive = asyncio.run(start())
    assert reason is not None and "had not loaded 3 s after it started" in reason and "startupTimeout" in reason
    assert not alive
