"""TorchServe three ways: stock with defaults, stock tuned by hand, and tsvk (ours).

Every TorchServe here gets its own ports (never 8080-8082 / 7070-7071, which other runs use), its
own run directory, and token auth off; beyond that, stock-default gets nothing (TorchServe starts one
worker per vCPU, batch 1, torch's default threads), stock-tuned gets batch 8 / 100 ms and OMP_NUM_THREADS
= vCPUs / workers (the only thread control the built-in handler has), and ours gets `tsvk config`.
In the GPU mode nothing is added for the stock systems: TorchServe finds the GPUs itself (one worker
per GPU by default) and its built-in handler loads the model onto the worker's GPU.
"""

from __future__ import annotations

import json
from pathlib import Path

from .... import defaults
from ....measure.loadgen import HttpTarget, identity
from ..tsmetrics import read_worker_env, torchserve_profile
from ....config.allocator import describe as describe_allocator
from ....errors import UsageError
from ....config.ports import free_ports, serving_on_free_ports
from ....processes import stopped_on_failure
from ....engines.torchserve.server import start_torchserve
from ....config.rendering import write_plan
from ....config.serving_config import plan_with_choices, tuned_choices, write_config
from .base import Deployment, RunContext, System

RESPONSE_TIMEOUT_S = 300
STOCK_ALLOCATOR = "glibc"  # stock TorchServe rows run with the malloc a plain `torchserve --start` gets
TORCHSERVE_MAX_REQUEST_BYTES = 6_553_500  # TorchServe 0.12's max_request_size: the defaults row keeps it


def address_properties() -> dict[str, str]:
    """Fresh ports for the three HTTP APIs and both gRPC APIs (TorchServe always opens gRPC)."""
    inference, management, metrics, grpc_inference, grpc_management = free_ports(5)
    return {"inference_address": f"http://127.0.0.1:{inference}", "management_address": f"http://127.0.0.1:{management}",
            "metrics_address": f"http://127.0.0.1:{metrics}", "grpc_inference_port": str(grpc_inference),
            "grpc_management_port": str(grpc_management)}


def stock_default_properties(model_store: Path, model: str) -> dict[str, str]:
    """Only what any TorchServe user must set: addresses, the model store, the model, auth."""
    return {
        **address_properties(),
        "model_store": str(model_store),
        "load_models": f"{model}.mar",
        "disable_token_authorization": "true",
    }


def stock_tuned_properties(model_store: Path, model: str, workers: int, batch: int, delay_ms: int,
                           largest_photo: int = 0) -> dict[str, str]:
    """A hand-tuned stock config; it holds photos of `largest_photo` bytes, as its user would set it to."""
    entry = {"1.0": {"defaultVersion": True, "marName": f"{model}.mar", "minWorkers": workers, "maxWorkers": workers,
                     "batchSize": batch, "maxBatchDelay": delay_ms, "responseTimeout": RESPONSE_TIMEOUT_S}}
    return {
        **stock_default_properties(model_store, model),
        "default_workers_per_model": str(workers),
        "models": json.dumps({model: entry}, separators=(",", ":")),
        **request_size_properties(largest_photo),
    }


def request_size_properties(largest_photo: int) -> dict[str, str]:
    """max_request_size where TorchServe's default (6,553,500 bytes) refuses the largest photo sent (a 48 MP JPEG)."""
    return {"max_request_size": str(largest_photo)} if largest_photo > TORCHSERVE_MAX_REQUEST_BYTES else {}


def render(properties: dict[str, str]) -> str:
    return "".join(f"{key}={value}\n" for key, value in properties.items())


def serve(ctx: RunContext, folder: Path, config: Path, model: str, env: dict[str, str] | None = None,
          allocator: str = defaults.ALLOCATOR) -> Deployment:
    """Start TorchServe on `config`, wait for every worker, and describe how to reach it. Stock systems
    pass allocator glibc: what a TorchServe started as its docs say runs with."""
    run = start_torchserve(config, folder / "run", env=env, allocator=allocator)
    with stopped_on_failure(run.stop):  # Ctrl+C or SIGTERM while waiting: leave nothing running
        run.wait_ready([model], timeout=ctx.options.ready_timeout_s)
    target = HttpTarget(f"{run.url('inference')}/predictions/{model}", identity, timeout_s=RESPONSE_TIMEOUT_S)
    details = {"config": str(config), "logs": str(folder / "run" / "logs"), "worker_env": read_worker_env(run.pid),
               "allocator": describe_allocator(allocator)}
    return Deployment(target, run.stop, details, profile=lambda: torchserve_profile(run, model))


class TorchServeDefault(System):
    name = "torchserve_default"
    label = "TorchServe, defaults"
    description = ("stock TorchServe 0.12 with its built-in image_classifier handler on a traced TorchScript model; "
                   "config has only addresses, model store and auth off (one worker per vCPU, batch 1)")

    def prepare(self, ctx: RunContext) -> None:
        ctx.stock_mar

    def start(self, ctx: RunContext, variant: dict) -> Deployment:
        folder = ctx.system_dir(self.name)
        config = folder / "config.properties"
        config.write_text(render(stock_default_properties(ctx.stock_mar.parent, ctx.options.model)))
        return serve(ctx, folder, config, ctx.options.model, allocator=STOCK_ALLOCATOR)


class TorchServeTuned(TorchServeDefault):
    name = "torchserve_tuned"
    label = "TorchServe, hand-tuned"
    description = ("the same stock archive with batchSize 8, maxBatchDelay 100 ms, W workers and OMP_NUM_THREADS = "
                   "vCPUs / W in TorchServe's environment; every W from 1 to vCPUs is run, the best is reported")

    def variants(self, ctx: RunContext) -> list[dict]:
        return [{"workers": w, "threads": max(1, ctx.vcpus // w)} for w in tuned_worker_counts(ctx.vcpus, ctx.options.device)]

    def start(self, ctx: RunContext, variant: dict) -> Deployment:
        folder = ctx.system_dir(f"{self.name}-w{variant['workers']}")
        config = folder / "config.properties"
        properties = stock_tuned_properties(ctx.stock_mar.parent, ctx.options.model, variant["workers"],
                                            ctx.options.batch, ctx.options.tuned_max_batch_delay_ms, ctx.largest_photo)
        config.write_text(render(properties))
        env = {"OMP_NUM_THREADS": str(variant["threads"])}
        return serve(ctx, folder, config, ctx.options.model, env=env, allocator=STOCK_ALLOCATOR)


def tuned_worker_counts(vcpus: int, device: str) -> list[int]:
    """Every count up to the vCPUs on a CPU; on a GPU, where workers share the device, 1, 2 and 4."""
    if device == "cuda":
        return [w for w in (1, 2, 4) if w <= vcpus]
    return list(range(1, vcpus + 1))


def tuned_choice(config: Path, model: str):
    """The workers, threads, batch and delay `tsvk tune` wrote for `model` into `config`; None when it has none."""
    try:
        return tuned_choices(config).get(model)
    except UsageError:
        return None


class OursTuned(System):
    name = "ours_tuned"
    label = "tsvk, tuned (ours)"
    description = ("our archive and handler with the workers, threads, batch and delay `tsvk tune` chose (configs/tuned.properties), "
                   "the rest of the config as `tsvk config` writes it")

    def unavailable(self, ctx: RunContext) -> str:
        if tuned_choice(ctx.options.tuned_config, ctx.options.model) is None:
            return f"{ctx.options.tuned_config} has no tuned entry for {ctx.options.model} (`make tune MODELS={ctx.options.model}`)"
        return ""

    def prepare(self, ctx: RunContext) -> None:
        ctx.ours_mar

    def start(self, ctx: RunContext, variant: dict) -> Deployment:
        folder = ctx.system_dir(self.name)
        config = folder / "config.properties"
        choice = tuned_choice(ctx.options.tuned_config, ctx.options.model)
        request = serving_on_free_ports(vcpus=ctx.vcpus, gpus=None if ctx.options.device == "cuda" else 0, models=(ctx.options.model,),
                                        model_store=ctx.ours_mar.parent, auth=False, concurrency=ctx.options.concurrency)
        write_plan(plan_with_choices(request, {ctx.options.model: choice}, origin="tsvk tune"), config)
        deployment = serve(ctx, folder, config, ctx.options.model)
        deployment.details["plan"] = {"workers": choice.workers, "threads": choice.intra_op_threads, "batch": choice.batch,
                                      "max_batch_delay_ms": choice.max_batch_delay_ms, "backend": ctx.options.backend,
                                      "device": ctx.options.device, "precision": ctx.options.precision,
                                      "tuned_config": str(ctx.options.tuned_config)}
        return deployment


class Ours(System):
    name = "ours"
    label = "tsvk (ours)"
    description = "our archive (tsvk archive, compiled backend), our handler, our generated config (tsvk config)"

    def archive(self, ctx: RunContext) -> tuple[Path, str, str]:
        """The .mar this row serves, with its backend and precision."""
        return ctx.ours_mar, ctx.options.backend, ctx.options.precision

    def prepare(self, ctx: RunContext) -> None:
        self.archive(ctx)

    def start(self, ctx: RunContext, variant: dict) -> Deployment:
        folder = ctx.system_dir(self.name)
        config = folder / "config.properties"
        plan = write_config(self.serving_request(ctx, **self.config_fields()), config)
        deployment = self.launch(ctx, folder, config)
        deployment.details["plan"] = self.plan_details(ctx, plan)
        return deployment

    def config_fields(self) -> dict:
        """What this row asks `tsvk config` beyond ours' request (the protocol rows: the front's ports)."""
        return {}

    def launch(self, ctx: RunContext, folder: Path, config: Path) -> Deployment:
        """Serve `config` and say where the load goes: TorchServe, /predictions."""
        return serve(ctx, folder, config, ctx.options.model)

    def serving_request(self, ctx: RunContext, **fields):
        """What `tsvk config` is asked for ours (the protocol rows ask the same, plus the front)."""
        mar, _, _ = self.archive(ctx)
        return serving_on_free_ports(
            vcpus=ctx.vcpus, workers=ctx.options.ours_workers, gpus=None if ctx.options.device == "cuda" else 0,
            models=(ctx.options.model,), model_store=mar.parent, auth=False, concurrency=ctx.options.concurrency,
            **fields,
        )

    def plan_details(self, ctx: RunContext, plan) -> dict:
        model = plan.models[0]
        _, backend, precision = self.archive(ctx)
        return {"workers": model.workers, "threads": model.intra_op_threads, "batch": model.batch,
                "max_batch_delay_ms": model.max_batch_delay_ms, "backend": backend,
                "device": ctx.options.device, "precision": precision, "gpus": plan.gpus}


class OursFast(Ours):
    name = "ours_fast"
    label = "tsvk (ours), fastest CPU artifact"
    description = ("ours as above, with the fastest artifact that passes verification on the CPU (default OpenVINO "
                   "int8, NNCF calibrated on real photos)")

    def archive(self, ctx: RunContext) -> tuple[Path, str, str]:
        return ctx.fast_mar, ctx.options.fast_backend, ctx.options.fast_precision
