"""tsvk's own engine (`tsvk serve --engine kserve`) as benchmark rows: the same archives, the same generated
config and the same load as `ours` and `ours_fast`, served with no Java; and the engine asked through the Open
Inference Protocol it serves itself (REST on the inference address, gRPC where the config serves the protocol).

Side by side with `ours` these rows are the cost of TorchServe's frontend; side by side with each other, the
cost of the protocol on one engine. The engine is a child of the benchmark, so the CPU and memory columns
include its server and every worker.
"""

from __future__ import annotations

from pathlib import Path

from ....measure.loadgen import HttpTarget, identity
from ....engines.kserve.engine_process import ENGINE, start_engine
from ....processes import stopped_on_failure
from .base import Deployment, RunContext
from .oip import ask_over_protocol, protocol_fields
from .torchserve import RESPONSE_TIMEOUT_S, Ours


def serve_on_engine(ctx: RunContext, folder: Path, config: Path, model: str) -> tuple[Deployment, object]:
    """Start the engine on `config`, wait until /ping says every model has its workers, and describe how to
    reach /predictions; also the run, for the protocol rows' addresses."""
    run = start_engine(config, folder / "run")
    with stopped_on_failure(run.stop):  # Ctrl+C or SIGTERM while waiting: leave nothing running
        run.wait_ready([model], timeout=ctx.options.ready_timeout_s)
    target = HttpTarget(f"{run.url('inference')}/predictions/{model}", identity, timeout_s=RESPONSE_TIMEOUT_S)
    details = {"config": str(config), "logs": str(folder / "run" / "logs"), "engine": ENGINE}
    return Deployment(target, run.stop, details), run


class OursKserve(Ours):
    name = "ours_kserve"
    label = "tsvk on its kserve engine (no Java)"
    description = ("ours (same archive, generated config and load) served by tsvk's own engine: the archive's handler in "
                   "tsvk's worker processes behind KServe's model server, no TorchServe")

    def launch(self, ctx: RunContext, folder: Path, config: Path) -> Deployment:
        return serve_on_engine(ctx, folder, config, ctx.options.model)[0]


class OursKserveFast(OursKserve):
    name = "ours_kserve_fast"
    label = "tsvk on its kserve engine, fastest CPU artifact"
    description = "ours_kserve with the archive ours_fast serves (the fastest artifact that passes verification on the CPU)"

    def archive(self, ctx: RunContext) -> tuple[Path, str, str]:
        return ctx.fast_mar, ctx.options.fast_backend, ctx.options.fast_precision


class OursKserveOipRest(OursKserve):
    name = "ours_kserve_oip_rest"
    label = "tsvk engine, Open Inference Protocol REST"
    description = "ours_kserve asked over the Open Inference Protocol's REST (base64 JSON) on the engine's own inference address"
    transport = "rest"

    def config_fields(self) -> dict:
        return protocol_fields()

    def launch(self, ctx: RunContext, folder: Path, config: Path) -> Deployment:
        deployment, run = serve_on_engine(ctx, folder, config, ctx.options.model)
        ask_over_protocol(deployment, self.transport, *run.oip_urls(), ctx.options.model)
        return deployment


class OursKserveOipGrpc(OursKserveOipRest):
    name = "ours_kserve_oip_grpc"
    label = "tsvk engine, Open Inference Protocol gRPC"
    description = "ours_kserve asked over the Open Inference Protocol's gRPC (tritonclient), KServe's gRPC server in the engine"
    transport = "grpc"
