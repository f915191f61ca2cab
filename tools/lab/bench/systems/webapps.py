"""What a user might pick instead of TorchServe: Flask under gunicorn, and LitServe with batching.

Both run the same eager model code (apps/eager.py) on the same weights. Flask: one gunicorn sync
worker per vCPU, each with its own model and one torch thread. LitServe: its defaults (one inference
worker per device, torch's default threads) with max_batch_size 8 and batch_timeout 0.1 s. In the GPU
mode both put their models on the GPU (LitServe with accelerator="cuda").
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

from ..apps import environment
from ....measure.loadgen import HttpTarget
from ....config.ports import free_port
from .base import Deployment, RunContext, System
from ....processes import start_detached, stopped_on_failure
from .process import clean_env, http_ok, wait_until

GUNICORN_CONF = "python:tsvk_tools.lab.bench.apps.gunicorn_conf"


def _bin(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


class FlaskGunicorn(System):
    name = "flask_gunicorn"
    label = "Flask + gunicorn"
    description = "a plain Flask app under gunicorn: one sync worker per vCPU, each with its own eager model and 1 thread"

    def prepare(self, ctx: RunContext) -> None:
        ctx.weights

    def start(self, ctx: RunContext, variant: dict) -> Deployment:
        folder = ctx.system_dir(self.name)
        ready_dir = folder / "ready"
        ready_dir.mkdir(exist_ok=True)
        port, workers = free_port(), ctx.vcpus
        command = [_bin("gunicorn"), "--workers", str(workers), "--threads", "1", "--bind", f"127.0.0.1:{port}",
                   "--timeout", "300", "--config", GUNICORN_CONF, "tsvk_tools.lab.bench.apps.flask_app:app"]
        env = clean_env(**{environment.MODEL_ENV: ctx.options.model, environment.WEIGHTS_ENV: str(ctx.weights),
                           environment.THREADS_ENV: "1", "OMP_NUM_THREADS": "1", environment.READY_DIR_ENV: str(ready_dir),
                           environment.DEVICE_ENV: ctx.options.device})
        server = start_detached(command, folder / "server.log", cwd=folder, env=env)
        with stopped_on_failure(server.stop):  # Ctrl+C or SIGTERM while waiting: leave nothing running
            wait_until(lambda: len(list(ready_dir.iterdir())) >= workers, server, ctx.options.ready_timeout_s, "gunicorn")
        target = HttpTarget(f"http://127.0.0.1:{port}/predictions", lambda jpeg: jpeg)
        return Deployment(target, server.stop, {"workers": workers, "threads": 1, "device": ctx.options.device,
                                                "log": str(folder / "server.log")})


def litserve_body(jpeg: bytes) -> bytes:
    return json.dumps({"image": base64.b64encode(jpeg).decode()}).encode()


class LitServeBatched(System):
    name = "litserve"
    label = "LitServe, batched"
    description = "LitServe 0.2 with max_batch_size 8, batch_timeout 0.1 s, its defaults otherwise (base64 JSON requests)"

    def prepare(self, ctx: RunContext) -> None:
        ctx.weights

    def start(self, ctx: RunContext, variant: dict) -> Deployment:
        folder = ctx.system_dir(self.name)
        port = free_port()
        command = [sys.executable, "-m", "tsvk_tools.lab.bench.apps.litserve_app", "--model", ctx.options.model,
                   "--weights", str(ctx.weights), "--port", str(port), "--max-batch-size", str(ctx.options.batch),
                   "--batch-timeout", "0.1", "--device", ctx.options.device]
        server = start_detached(command, folder / "server.log", cwd=folder, env=clean_env())
        with stopped_on_failure(server.stop):  # Ctrl+C or SIGTERM while waiting: leave nothing running
            wait_until(lambda: http_ok(f"http://127.0.0.1:{port}/health"), server, ctx.options.ready_timeout_s, "LitServe")
        target = HttpTarget(f"http://127.0.0.1:{port}/predict", litserve_body, content_type="application/json")
        return Deployment(target, server.stop, {"max_batch_size": ctx.options.batch, "batch_timeout_s": 0.1,
                                                "device": ctx.options.device, "log": str(folder / "server.log")})
