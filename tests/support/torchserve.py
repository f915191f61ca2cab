"""Test helpers for a real TorchServe: configs on free ports, a server that is always stopped, a metrics yaml."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator

import requests

from tsvk_tools import defaults
from tsvk.worker.metrics import metric_definitions
from tsvk_tools.cli import main as tsvk
from tsvk_tools.engines.torchserve.server import TorchServeRun, start_torchserve
from tsvk_tools.config.serving_config import ServingRequest, write_config

WITHOUT_TSVK = Path(__file__).parent / "without_tsvk"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def archive_tiny(store: Path, factory: str = "TinyNet", *extra: str, model_file: Path = FIXTURES / "tiny_model.py") -> Path:
    """tests/fixtures/tiny_model.py (or another `model_file` of the fixtures) packed eagerly as `tiny.mar` into `store`
    (random weights, batches 1..4): a model that loads in seconds. `SlowTinyNet` takes a steady time per batch, for
    tests under load."""
    assert tsvk(["archive", "--model", "tiny", "--backend", "eager", "--model-file", str(model_file),
                 "--model-factory", factory, "--resize", "40", "--crop", "32", "--labels", str(FIXTURES / "tiny_labels.txt"),
                 "--weights", "none", "--max-batch", "4", "--model-store", str(store), *extra]) == 0
    return store


def isolated_env() -> dict[str, str]:
    """Workers see no installed tsvk: only the copy inside the archive."""
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(WITHOUT_TSVK), os.environ.get("PYTHONPATH")]))}


@contextlib.contextmanager
def running_torchserve(request: ServingRequest, workdir: Path, timeout: float = 300,
                       extra_properties: dict[str, str] | None = None, allocator: str = defaults.ALLOCATOR) -> Iterator[TorchServeRun]:
    """Generate the config (plus any extra properties), start TorchServe with tsvk hidden, wait, always stop."""
    config = workdir / "config.properties"
    write_config(request, config)
    if extra_properties:
        with config.open("a") as properties:
            properties.writelines(f"{key}={value}\n" for key, value in extra_properties.items())
    run = start_torchserve(config, workdir / "run", env=isolated_env(), allocator=allocator)
    try:
        run.wait_ready(timeout=timeout)
        yield run
    finally:
        run.stop()


def post_image(run: TorchServeRun, model: str, body: bytes, **kwargs) -> requests.Response:
    return requests.post(f"{run.url('inference')}/predictions/{model}", data=body, headers=run.headers("inference"), timeout=120, **kwargs)


def post_concurrently(url: str, bodies: list[bytes], headers: dict[str, str] | None = None) -> list[requests.Response]:
    """Send all at once (a barrier releases the senders together) so TorchServe batches them."""
    import threading

    responses: list[requests.Response | None] = [None] * len(bodies)
    barrier = threading.Barrier(len(bodies))

    def send(index: int) -> None:
        barrier.wait()
        responses[index] = requests.post(url, data=bodies[index], headers=headers or {}, timeout=120)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(bodies))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return responses  # type: ignore[return-value]


def model_metrics_yaml_section() -> dict[str, list[dict]]:
    """The handler's metrics as the `model_metrics:` section of a TorchServe metrics yaml (metrics_config)."""
    section: dict[str, list[dict]] = {}
    for name, spec in metric_definitions().items():
        section.setdefault(spec["type"], []).append({"name": name, "unit": spec["unit"], "dimensions": spec["dimensions"]})
    return section
