"""Start the server under test the way a user would: a `tsvk archive` .mar, a `tsvk config` file on free localhost
ports, then TorchServe with `tsvk serve`'s key renewer (and the OIP front), or tsvk's own engine (`tsvk serve --engine
kserve`: it speaks the protocol itself, and its keys do not expire); always stopped afterwards."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from ... import defaults
from ... import progress
from ...images import jpeg_bytes, photo_array
from ...archive.archive_info import read_archive_settings
from ...keys import start_key_renewer
from ...oip.config import read_front_config
from ...oip.process import front_urls, start_front, wait_front_ready
from ...config.ports import free_ports
from ...engines.registry import engine_named
from ...config.serving_config import ServingRequest, write_config
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
    other_models: tuple[str, ...] = ()  # served beside `model` (a detector, a segmenter): attacked by the hostile classes
    oip: bool = False  # also start the Open Inference Protocol front (REST and gRPC) on free localhost ports
    deadline_ms: int | None = None  # `tsvk config --deadline-ms`: requests queued longer are refused 503 at once
    engine: str = defaults.ENGINE  # what serves the archives: torchserve, or kserve (tsvk's own engine)
    properties: dict[str, str] | None = None  # config.properties keys beyond `tsvk config`'s (a part's own bounds)


def serving_request(spec: ServiceSpec) -> ServingRequest:
    inference, management, metrics, grpc_inference, grpc_management, oip_rest, oip_grpc = free_ports(7)
    return ServingRequest(
        vcpus=spec.vcpus,
        workers=spec.workers,
        models=(spec.model, *spec.other_models),
        model_store=spec.model_store,
        auth=True,
        concurrency=QUEUE_CLIENTS,
        inference_address=f"http://127.0.0.1:{inference}",
        management_address=f"http://127.0.0.1:{management}",
        metrics_address=f"http://127.0.0.1:{metrics}",
        grpc_inference_port=grpc_inference,
        grpc_management_port=grpc_management,
        deadline_ms=spec.deadline_ms,
        protocol="oip" if spec.oip else defaults.PROTOCOL,
        oip_address="127.0.0.1",
        oip_rest_port=oip_rest,
        oip_grpc_port=oip_grpc,
    )


@contextlib.contextmanager
def running_service(spec: ServiceSpec) -> Iterator[Service]:
    """The engine on the generated config, ready (TorchServe with its key renewer); stopped however the block ends."""
    spec.work_dir.mkdir(parents=True, exist_ok=True)
    config = spec.work_dir / "config.properties"
    plan = write_config(serving_request(spec), config)
    if spec.token_expiration_min is not None:
        text = config.read_text()
        config.write_text(
            "\n".join(
                f"token_expiration_min={spec.token_expiration_min:g}" if line.startswith("token_expiration_min=") else line
                for line in text.splitlines()
            )
            + "\n"
        )
    with config.open("a") as extra:
        extra.writelines(f"{key}={value}\n" for key, value in (spec.properties or {}).items())
    engine = engine_named(spec.engine)
    with progress.step(f"start {engine.label}", "its server and workers"):
        run = engine.start(config, spec.work_dir / "run", allocator=spec.allocator, env=spec.env)
    try:
        if engine.keys_expire:
            start_key_renewer(run)  # before waiting: a slow start must not outlive the first keys
        with progress.step("load the models", f"{spec.model} and the others READY"):
            run.wait_ready(timeout=600)
        front = _oip_urls(spec, run)
        model = plan.models[0]
        tasks = {name: read_archive_settings(spec.model_store / f"{name}.mar").task for name in (spec.model, *spec.other_models)}
        yield Service(
            run,
            spec.model,
            model.workers,
            int(run.properties["job_queue_size"]),  # the config's, a part's own included
            model.response_timeout_s,
            real_photo(),
            tasks,
            front,
            {m.name: m.batch for m in plan.models},
            spec.deadline_ms,
        )
    finally:
        run.stop()


def _oip_urls(spec: ServiceSpec, run) -> tuple[str, str] | None:
    """The Open Inference Protocol's REST base URL and gRPC target: TorchServe's front (tools' own, not started with
    the workers' env), or the engine's own servers; None when the spec serves no OIP."""
    if not spec.oip:
        return None
    return run.oip_urls() if engine_named(spec.engine).serves_protocol_itself else _start_front(run)


def _start_front(run) -> tuple[str, str]:
    """The OIP front on the run's config, ready: its REST base URL and gRPC target."""
    start_front(run.config, run.run_dir)
    config = read_front_config(run.config)
    wait_front_ready(config, run.run_dir)
    return front_urls(config)


def real_photo() -> bytes:
    """A real photograph at a camera-like 640x480: what a good request carries."""
    return jpeg_bytes(photo_array("chelsea"), size=(640, 480))
