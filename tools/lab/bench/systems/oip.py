"""tsvk over the Open Inference Protocol: the `ours` archive and config, asked through the front.

Same archive, same generated config (plus `--protocol oip`), same photos and load as `ours`; only the
protocol differs, so the two rows side by side are the cost of the front. REST sends the protocol's
JSON with each photo as base64 text (as KServe's image examples do); gRPC sends the raw bytes with
tritonclient, one client per load thread. The front is a child of the benchmark like TorchServe, so
the CPU and memory columns include it.
"""

from __future__ import annotations

import base64
import json
import threading
from pathlib import Path

from tsvk.request import oip

from ....measure.loadgen import HttpTarget
from ....oip.config import read_front_config
from ....oip.process import front_urls, start_front, wait_front_ready
from ....config.ports import free_ports
from ....processes import stopped_on_failure
from .base import Deployment, RunContext
from .torchserve import Ours, serve

_GRPC_STATUS = {"StatusCode.INVALID_ARGUMENT": 400, "StatusCode.NOT_FOUND": 404, "StatusCode.UNAVAILABLE": 503,
                "StatusCode.UNAUTHENTICATED": 401}


def rest_body(image: bytes) -> bytes:
    """One photo as an Open Inference Protocol REST request."""
    tensor = {"name": oip.IMAGES, "datatype": "BYTES", "shape": [1], "data": [base64.b64encode(image).decode("ascii")]}
    return json.dumps({"inputs": [tensor]}).encode()


class _GrpcAnswer:
    """What the load generator reads from an answer: status, text, and {label: probability}."""

    def __init__(self, status_code: int, text: str = "", answer: dict | None = None):
        self.status_code, self.text, self._answer = status_code, text, answer

    def json(self) -> dict:
        return self._answer or {}


class GrpcTarget(HttpTarget):
    """The same interface as HttpTarget (make_body, post), over the protocol's gRPC with tritonclient."""

    def __init__(self, target: str, model: str, timeout_s: float, input_shape: tuple[int, ...] = (1,)):
        """`input_shape`: (1,) for our front; (1, 1) for a batching Triton model of per-request shape (1,)."""
        super().__init__(url=target, make_body=lambda image: image, timeout_s=timeout_s)
        object.__setattr__(self, "_model", model)
        object.__setattr__(self, "_input_shape", list(input_shape))
        object.__setattr__(self, "_local", threading.local())

    def post(self, session, body: bytes) -> _GrpcAnswer:
        import numpy as np
        import tritonclient.grpc as client
        from tritonclient.utils import InferenceServerException

        if not hasattr(self._local, "client"):
            self._local.client = client.InferenceServerClient(self.url)
        tensor = client.InferInput(oip.IMAGES, self._input_shape, "BYTES")
        tensor.set_data_from_numpy(np.array([body], dtype=np.object_).reshape(self._input_shape))
        try:
            result = self._local.client.infer(self._model, [tensor], client_timeout=self.timeout_s)
        except InferenceServerException as err:
            return _GrpcAnswer(_GRPC_STATUS.get(str(err.status()), 500), f"{err.status()}: {err.message()}"[:200])
        labels = [v.decode() for v in result.as_numpy(oip.LABELS)[0]]
        return _GrpcAnswer(200, answer=dict(zip(labels, map(float, result.as_numpy(oip.PROBABILITIES)[0]))))


def protocol_fields() -> dict:
    """`tsvk config --protocol oip` on free ports: the Open Inference Protocol's REST and gRPC ports."""
    rest_port, grpc_port = free_ports(2)
    return {"protocol": "oip", "oip_rest_port": rest_port, "oip_grpc_port": grpc_port}


def ask_over_protocol(deployment: Deployment, transport: str, rest: str, grpc: str, model: str) -> None:
    """Point `deployment`'s load at the Open Inference Protocol over `transport` (rest or grpc) instead of
    /predictions: the same photos, the same timeout."""
    timeout = deployment.target.timeout_s
    deployment.target = (HttpTarget(f"{rest}/v2/models/{model}/infer", rest_body, "application/json", timeout)
                         if transport == "rest" else GrpcTarget(grpc, model, timeout))
    deployment.details["protocol"] = f"oip-{transport}"


class OursOipRest(Ours):
    name = "ours_oip_rest"
    label = "tsvk, Open Inference Protocol REST"
    description = "ours (same archive, config and load) asked through the Open Inference Protocol front over REST (base64 JSON)"
    transport = "rest"

    def config_fields(self) -> dict:
        return protocol_fields()

    def launch(self, ctx: RunContext, folder: Path, config: Path) -> Deployment:
        deployment = serve(ctx, folder, config, ctx.options.model)
        with stopped_on_failure(deployment.stop):  # Ctrl+C or SIGTERM while waiting: leave nothing running
            start_front(config, folder / "run")
            front = read_front_config(config)
            wait_front_ready(front, folder / "run")
        ask_over_protocol(deployment, self.transport, *front_urls(front), ctx.options.model)
        return deployment


class OursOipGrpc(OursOipRest):
    name = "ours_oip_grpc"
    label = "tsvk, Open Inference Protocol gRPC"
    description = "ours (same archive, config and load) asked through the Open Inference Protocol front over gRPC (tritonclient)"
    transport = "grpc"
