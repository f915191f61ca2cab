"""Start the TorchServe under test the way a user would: a `tsvk archive` .mar, a `tsvk config`
file on free localhost ports, `tsvk serve`'s key renewer; always stopped afterwards."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from tsvk import defaults

from .. import progress
from ..images import jpeg_bytes, photo_array
from ..keys import start_key_renewer
from ..ports import free_ports
from ..server import start_torchserve
from ..serving_config import ServingRequest, write_config
from .parts import Service

QUEUE_CLIENTS = 50  # --concurrency for the config: job_queue_size = 100, TorchServe's smallest useful queue


@dataclass(frozen=True)
class ServiceSpec:
    model_store: Path
    model: str
    work_dir: Path
    workers: int = 2
    vcpus: int | None = None
    token_expiration_min: float | None = None  # None: the generator's default; fractions for tests of expiry
    env: dict[str, str] | None = None
    allocator: str = defaults.ALLOCATOR


def serving_request(spec: ServiceSpec) -> ServingRequest:
    inference, management, metrics, grpc_inference, grpc_management = free_ports(5)
    return ServingRequest(
        vcpus=spec.vcpus, workers=spec.workers, models=(spec.model,), model_store=spec.model_store, auth=True,
        concurrency=QUEUE_CLIENTS, inference_address=f"http://127.0.0.1:{inference}",
        management_address=f"http://127.0.0.1:{management}", metrics_address=f"http://127.0.0.1:{metrics}",
        grpc_inference_port=grpc_inference, grpc_management_port=grpc_management,
    )


@contextlib.contextmanager
def running_service(spec: ServiceSpec) -> Iterator[Service]:
    """TorchServe on the generated config, ready, with its key renewer; stopped however the block ends."""
    spec.work_dir.mkdir(parents=True, exist_ok=True)
    config = spec.work_dir / "config.properties"
    plan = write_config(serving_request(spec), config)
    if spec.token_expiration_min is not None:
        text = config.read_text()
        config.write_text("\n".join(f"token_expiration_min={spec.token_expiration_min:g}" if line.startswith("token_expiration_min=")
                                    else line for line in text.splitlines()) + "\n")
    with progress.step("start TorchServe", "its frontend (Java)"):
        run = start_torchserve(config, spec.work_dir / "run", env=spec.env, allocator=spec.allocator)
    try:
        start_key_renewer(run)  # before waiting: a slow start must not outlive the first keys
        with progress.step("load the model", f"{spec.model} READY"):
            run.wait_ready(timeout=600)
        model = plan.models[0]
        yield Service(run, spec.model, model.workers, 2 * QUEUE_CLIENTS, model.response_timeout_s, real_photo())
    finally:
        run.stop()


def real_photo() -> bytes:
    """A real photograph at a camera-like 640x480: what a good request carries."""
    return jpeg_bytes(photo_array("chelsea"), size=(640, 480))
