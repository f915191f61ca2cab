"""Test helpers for a real TorchServe: free ports, configs on them, a server that is always stopped."""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path
from typing import Iterator

import requests

from tsvk_tools.server import TorchServeRun, start_torchserve
from tsvk_tools.serving_config import ServingRequest, write_config

WITHOUT_TSVK = Path(__file__).parent / "without_tsvk"


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def request_on_free_ports(**fields) -> ServingRequest:
    inference, management, metrics, grpc_inference, grpc_management = free_ports(5)
    return ServingRequest(
        inference_address=f"http://127.0.0.1:{inference}",
        management_address=f"http://127.0.0.1:{management}",
        metrics_address=f"http://127.0.0.1:{metrics}",
        grpc_inference_port=grpc_inference,
        grpc_management_port=grpc_management,
        **fields,
    )


def isolated_env() -> dict[str, str]:
    """Workers see no installed tsvk: only the copy inside the archive."""
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(WITHOUT_TSVK), os.environ.get("PYTHONPATH")]))}


@contextlib.contextmanager
def running_torchserve(request: ServingRequest, workdir: Path, timeout: float = 300) -> Iterator[TorchServeRun]:
    """Generate the config, start TorchServe with tsvk hidden, wait for every model, always stop it."""
    config = workdir / "config.properties"
    write_config(request, config)
    run = start_torchserve(config, workdir / "run", env=isolated_env())
    try:
        run.wait_ready(timeout=timeout)
        yield run
    finally:
        run.stop()


def post_image(run: TorchServeRun, model: str, body: bytes, **kwargs) -> requests.Response:
    return requests.post(f"{run.url('inference')}/predictions/{model}", data=body, headers=run.headers("inference"), timeout=120, **kwargs)
