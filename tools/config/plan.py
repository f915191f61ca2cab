"""What a served config is planned from and planned to: the user's request, each model's plan (workers, threads,
batch, delay, timeout) and the machine's, and a model's numbers chosen by measurement instead of by the rule.

The generator (serving_config.py) turns a request into a plan; rendering.py writes a plan as config.properties.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from .. import defaults
from ..tls import CERTIFICATE_FILE, PRIVATE_KEY_FILE


@dataclass(frozen=True)
class ServingRequest:
    """What the user asked for; None means: decide from the machine and the archives."""

    vcpus: int | None = None
    workers: int | None = None
    gpus: int | None = None
    batch: int | None = None
    max_batch_delay_ms: int | None = None
    response_timeout_s: int | None = None
    models: tuple[str, ...] | None = None
    model_store: Path = Path(defaults.MODEL_STORE)
    archive_check: bool = True
    auth: bool = True
    concurrency: int = defaults.CONCURRENCY
    core_pinning: bool = False
    max_request_mb: int = defaults.MAX_REQUEST_MB
    deadline_ms: int | None = None
    token_expiry_min: int = defaults.TOKEN_EXPIRY_MIN  # `tsvk serve` renews the keys at half this age (tools/keys.py)
    inference_address: str = defaults.INFERENCE_ADDRESS
    management_address: str = defaults.MANAGEMENT_ADDRESS
    metrics_address: str = defaults.METRICS_ADDRESS
    grpc_inference_port: int = defaults.GRPC_INFERENCE_PORT
    grpc_management_port: int = defaults.GRPC_MANAGEMENT_PORT
    memory_mb: int | None = None  # what TorchServe may use; None: the cgroup limit, else the machine's memory
    protocol: str = defaults.PROTOCOL  # "oip": also the Open Inference Protocol front `tsvk serve` starts
    oip_address: str = defaults.OIP_ADDRESS
    oip_rest_port: int = defaults.OIP_REST_PORT
    oip_grpc_port: int = defaults.OIP_GRPC_PORT
    tls_key: Path | None = None  # with tls_cert: https on every address, gRPC over TLS (TorchServe's keys; tools/tls.py)
    tls_cert: Path | None = None


@dataclass(frozen=True)
class ModelPlan:
    name: str
    workers: int
    batch: int
    max_batch_delay_ms: int
    response_timeout_s: int
    intra_op_threads: int
    inter_op_threads: int = 1
    measured: str = ""  # `tsvk tune`: the measurement that chose these numbers, written above the model's lines


@dataclass(frozen=True)
class ModelChoice:
    """Numbers for one model decided elsewhere (by `tsvk tune`'s measurements) instead of by the rule."""

    workers: int
    intra_op_threads: int
    inter_op_threads: int
    batch: int
    max_batch_delay_ms: int
    measured: str = ""


@dataclass(frozen=True)
class ServingPlan:
    request: ServingRequest
    vcpus: int
    gpus: int
    models: tuple[ModelPlan, ...] = field(default_factory=tuple)
    origin: str = "tsvk config"  # the command that wrote the file, named in its first line

    @property
    def total_workers(self) -> int:
        return sum(m.workers for m in self.models)


def tls_properties(request: ServingRequest) -> dict[str, str]:
    """TorchServe's key file settings, as absolute paths (the server runs in its run directory)."""
    return {PRIVATE_KEY_FILE: os.path.abspath(request.tls_key), CERTIFICATE_FILE: os.path.abspath(request.tls_cert)}
