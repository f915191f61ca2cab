"""The peers at their best: stock TorchServe with its own `pt2` compile, Triton and LitServe serving the same
OpenVINO int8 IR as ours_fast.

- torchserve_best: the stock image_classifier handler on the eager model (TorchServe's model-file path),
  model-config.yaml `pt2: {compile: {enable: true, backend: B}}` for B in inductor and openvino, W workers x
  vCPUs/W threads, batch 8 or 4 / 100 ms; every (B, W, batch) is tried and the fastest is the row.
  The base handler compiles lazily, so a backend that cannot compile fails the requests, not the start:
  that variant is recorded with its error.
- triton: PyTriton 0.7 (a real tritonserver), dynamic batching (max batch 8 or 4, 100 ms queue delay), N model
  instances x vCPUs/N OpenVINO threads; the client sends raw JPEG bytes over Triton's gRPC with
  tritonclient, the bound function decodes and preprocesses (apps/triton_app.py). It runs from its own
  venv of Debian's python3 (`make triton-venv`): with other CPython 3.11 builds Triton's Python stub fails
  at model load ('_thread.RLock' object has no attribute '_recursion_count').
- litserve_fast: LitServe batched (8 or 4, 0.1 s), W inference workers x vCPUs/W threads, the same IR and
  preprocessing code as Triton's (apps/litserve_openvino_app.py).
- torchserve_draft, litserve_draft: torchserve_best and litserve_fast with the decoding their users write by hand
  for phone photos: Pillow's `Image.draft` (a JPEG decoded at a reduced DCT scale) and `ImageOps.exif_transpose`.
  Their rows show what a peer's own best code makes of photos as sent (`--photos as-sent`).

Each peer is tried with the run's batch and half of it (`peer_batches`): with clients that wait for their
answers, batch x instances = concurrency leaves every instance idle while its answers go out and the next
requests come in, and half the batch keeps one waiting; which is faster depends on the peer and the model.
"""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

import yaml
from tsvk.common import HandlerSettings

from ....processes import Child, start_detached, stopped_on_failure
from ....config.ports import free_ports
from .base import Deployment, RunContext, System
from .oip import GrpcTarget
from .process import clean_env, http_ok, wait_until
from .torchserve import STOCK_ALLOCATOR, TorchServeTuned, render, serve, stock_tuned_properties, tuned_worker_counts
from .webapps import litserve_body
from ..assets import labels_for
from ....measure.loadgen import HttpTarget, run_closed_loop
from ....measure.stats import EXCEPTION_LINE

PT2_BACKENDS = ("inductor", "openvino")
# `make triton-venv`; relative to the project root, where make runs. Never resolve(): the venv is its symlinked python
TRITON_PYTHON = Path(".venv-triton/bin/python")
APPS = Path(__file__).resolve().parents[1] / "apps"
MAX_QUEUE_DELAY_MS = 100  # as torchserve_tuned's maxBatchDelay
SINGLE_WARMUP = 2  # requests sent one at a time (batches of one) before the full warm-up


class TorchServeBest(TorchServeTuned):
    name = "torchserve_best"
    label = "TorchServe, pt2 compiled, hand-tuned"
    description = ("stock TorchServe 0.12, its image_classifier handler on the eager model (model file + state_dict) with "
                   "its documented model-config.yaml `pt2: {compile: {enable: true, backend: B}}`, batch 8 or 4 / 100 ms, "
                   "W workers x vCPUs/W threads; every backend B (inductor, openvino), W and batch is run, the fastest "
                   "is the row; fp32")

    handler: Path | None = None  # None: TorchServe's built-in image_classifier

    def prepare(self, ctx: RunContext) -> None:
        for backend in PT2_BACKENDS:
            ctx.pt2_mar(backend, self.handler)

    def variants(self, ctx: RunContext) -> list[dict]:
        return pt2_variants(ctx.vcpus, ctx.options.device, ctx.options.batch)

    def warm_up(self, deployment: Deployment, images: list[bytes], options) -> list:
        """torch.compile compiles at the first batch and again, for a dynamic batch size, at the first batch of another
        size: a batch of one first, then the usual warm-up of full batches, so both compiles happen before the load
        (otherwise the measured load waits minutes for the second). When nothing answered, the worker's own error
        (the compile's) is the error: TorchServe answers only 503."""
        warm = run_closed_loop(deployment.target, images, SINGLE_WARMUP, 1) + super().warm_up(deployment, images, options)
        if warm and not any(record.ok for record in warm):
            raise RuntimeError(f"no warm-up request was answered; the worker's last error: {last_error(Path(deployment.details['logs']))}")
        return warm

    def start(self, ctx: RunContext, variant: dict) -> Deployment:
        folder = ctx.system_dir(f"{self.name}-{variant['backend']}-w{variant['workers']}-b{variant['batch']}")
        config = folder / "config.properties"
        mar = ctx.pt2_mar(variant["backend"], self.handler)
        properties = stock_tuned_properties(mar.parent, ctx.options.model, variant["workers"], variant["batch"],
                                            ctx.options.tuned_max_batch_delay_ms, ctx.largest_photo)
        config.write_text(render(properties))
        env = {"OMP_NUM_THREADS": str(variant["threads"])}
        return serve(ctx, folder, config, ctx.options.model, env=env, allocator=STOCK_ALLOCATOR)


class TorchServeDraft(TorchServeBest):
    name = "torchserve_draft"
    label = "TorchServe, pt2 compiled, hand-tuned, hand-written JPEG draft"
    description = ("torchserve_best with the custom handler file a user writes for phone photos (apps/torchserve_draft_handler.py): "
                   "image_classifier whose preprocess opens each photo with Pillow's draft (a JPEG decoded at the smallest DCT "
                   "scale leaving both sides >= 256) and ImageOps.exif_transpose; every backend, W and batch as torchserve_best")
    handler = APPS / "torchserve_draft_handler.py"


def last_error(logs: Path) -> str:
    """The last exception line (`SomeError: ...`) of TorchServe's model log, or a note that there is none."""
    log = logs / "model_log.log"
    lines = log.read_text(errors="replace").splitlines() if log.is_file() else []
    errors = [line.split("MODEL_LOG - ", 1)[-1].strip() for line in lines if EXCEPTION_LINE.search(line)]
    return errors[-1] if errors else f"none found in {log}"


def peer_batches(batch: int) -> list[int]:
    """The batch sizes a peer is tried with: the run's and half of it (the module's docstring says why)."""
    return sorted({batch, max(1, batch // 2)}, reverse=True)


def pt2_variants(vcpus: int, device: str, batch: int) -> list[dict]:
    """Every compile backend with every hand-tuned worker count and batch."""
    return [{"backend": backend, "workers": w, "threads": max(1, vcpus // w), "batch": b}
            for backend in PT2_BACKENDS for w in tuned_worker_counts(vcpus, device) for b in peer_batches(batch)]


def fast_model_files(ctx: RunContext, folder: Path) -> dict:
    """The fast archive's IR, unpacked as model.xml/.bin into `folder`, its labels as a JSON list, and its
    preprocessing numbers: what a Triton or LitServe user takes from the same artifact."""
    with zipfile.ZipFile(ctx.fast_mar) as mar:
        settings = HandlerSettings.from_model_yaml(yaml.safe_load(mar.read("model-config.yaml")))
        ir_zip = folder / "ir.zip"
        ir_zip.write_bytes(mar.read(settings.artifact.file))
    with zipfile.ZipFile(ir_zip) as ir:
        ir.extractall(folder)
    ir_zip.unlink()
    labels = folder / "labels.json"
    labels.write_text(json.dumps(labels_for(ctx.options.model)))
    prep = settings.preprocess
    return {"xml": folder / "model.xml", "labels": labels, "resize": prep.resize, "crop": prep.crop,
            "mean": list(prep.mean), "std": list(prep.std)}


def model_arguments(files: dict, threads: int) -> list[str]:
    """The apps' OpenVinoClassifier options (apps/openvino_classifier.add_model_arguments)."""
    return ["--xml", str(files["xml"]), "--labels", str(files["labels"]), "--threads", str(threads),
            "--resize", str(files["resize"]), "--crop", str(files["crop"]),
            "--mean", *map(str, files["mean"]), "--std", *map(str, files["std"])]


def split_variants(vcpus: int, key: str, batch: int) -> list[dict]:
    """`key` processes or instances x vCPUs/`key` threads, for every count up to the vCPUs, with each peer batch."""
    return [{key: n, "threads": max(1, vcpus // n), "batch": b} for n in range(1, vcpus + 1) for b in peer_batches(batch)]


def triton_command(python: Path, files: dict, model: str, ports: tuple[int, int, int], variant: dict,
                   delay_ms: int) -> list[str]:
    http, grpc, metrics = ports
    return [str(python), str(APPS / "triton_app.py"), *model_arguments(files, variant["threads"]), "--model-name", model,
            "--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics),
            "--instances", str(variant["instances"]), "--max-batch-size", str(variant["batch"]), "--max-queue-delay-ms", str(delay_ms)]


def start_server(command: list[str], folder: Path, ready, timeout: float, what: str, env: dict | None = None) -> Child:
    """A server in its own session, stopped again if it does not come up (or Ctrl+C/SIGTERM while waiting)."""
    server = start_detached(command, folder / "server.log", cwd=folder, env=env or clean_env())
    with stopped_on_failure(server.stop):
        wait_until(ready, server, timeout, what)
    return server


class FastArtifactServer(System):
    """A server a user writes around ours_fast's IR: one start per `split` count (instances or workers) x
    vCPUs/count threads, given the IR, labels and preprocessing unpacked from the fast archive."""

    split = ""  # what the vCPUs are split into: "instances" or "workers"

    def prepare(self, ctx: RunContext) -> None:
        ctx.fast_mar

    def variants(self, ctx: RunContext) -> list[dict]:
        return split_variants(ctx.vcpus, self.split, ctx.options.batch)

    def start(self, ctx: RunContext, variant: dict) -> Deployment:
        folder = ctx.system_dir(f"{self.name}-{self.split[0]}{variant[self.split]}-b{variant['batch']}")
        server, target, details = self.launch(ctx, folder, fast_model_files(ctx, folder), variant)
        return Deployment(target, server.stop, {**variant, "max_batch_size": variant["batch"], **details,
                                                "log": str(folder / "server.log")})

    def launch(self, ctx: RunContext, folder: Path, files: dict, variant: dict) -> tuple[Child, HttpTarget, dict]:
        """Start the server, wait until it answers; its target and what to record of it."""
        raise NotImplementedError


class Triton(FastArtifactServer):
    name = "triton"
    split = "instances"
    label = "Triton (PyTriton), OpenVINO int8"
    description = ("Triton Inference Server via PyTriton 0.7, dynamic batching (max batch 8 or 4, 100 ms queue delay), N model "
                   "instances x vCPUs/N threads (best N and batch reported), serving ours_fast's OpenVINO int8 IR with OpenVINO's "
                   "Python API in the bound function; the client sends raw JPEG bytes over gRPC (tritonclient), the bound "
                   "function decodes with Pillow, resizes the shorter side (bilinear), center-crops and normalizes in NumPy")

    def unavailable(self, ctx: RunContext) -> str:
        if not TRITON_PYTHON.is_file():
            return f"{TRITON_PYTHON} is missing (`make triton-venv` builds it from Debian's python3)"
        return ""

    def launch(self, ctx: RunContext, folder: Path, files: dict, variant: dict) -> tuple[Child, HttpTarget, dict]:
        ports = tuple(free_ports(3))
        command = triton_command(TRITON_PYTHON.absolute(), files, ctx.options.model, ports, variant, MAX_QUEUE_DELAY_MS)
        model_ready = f"http://127.0.0.1:{ports[0]}/v2/models/{ctx.options.model}/ready"
        server = start_server(command, folder, lambda: http_ok(model_ready), ctx.options.ready_timeout_s, "Triton")
        target = GrpcTarget(f"127.0.0.1:{ports[1]}", ctx.options.model, 300, input_shape=(1, 1))
        return server, target, {"max_queue_delay_ms": MAX_QUEUE_DELAY_MS, "python": str(TRITON_PYTHON)}


class LitServeFast(FastArtifactServer):
    name = "litserve_fast"
    split = "workers"
    app_arguments: tuple[str, ...] = ()
    label = "LitServe, OpenVINO int8"
    description = ("LitServe 0.2 batched (max_batch_size 8 or 4, batch_timeout 0.1 s), W inference workers x vCPUs/W threads (best "
                   "W and batch reported), serving ours_fast's OpenVINO int8 IR with OpenVINO's Python API; base64 JSON requests, "
                   "decoded with Pillow, resized, center-cropped and normalized in NumPy (the same code as the Triton row)")

    def launch(self, ctx: RunContext, folder: Path, files: dict, variant: dict) -> tuple[Child, HttpTarget, dict]:
        (port,) = free_ports(1)
        command = [sys.executable, "-m", "tsvk_tools.lab.bench.apps.litserve_openvino_app", *model_arguments(files, variant["threads"]),
                   "--port", str(port), "--workers", str(variant["workers"]), "--max-batch-size", str(variant["batch"]),
                   "--batch-timeout", "0.1", *self.app_arguments]
        server = start_server(command, folder, lambda: http_ok(f"http://127.0.0.1:{port}/health"), ctx.options.ready_timeout_s, "LitServe")
        target = HttpTarget(f"http://127.0.0.1:{port}/predict", litserve_body, content_type="application/json")
        return server, target, {"batch_timeout_s": 0.1}


class LitServeDraft(LitServeFast):
    name = "litserve_draft"
    label = "LitServe, OpenVINO int8, hand-written JPEG draft"
    description = ("litserve_fast with the decoding a user writes by hand for phone photos: Pillow's draft (a JPEG decoded at the "
                   "smallest DCT scale leaving both sides >= the resize) and ImageOps.exif_transpose, then the same resize, crop "
                   "and normalize in NumPy; every W and batch as litserve_fast")
    app_arguments = ("--draft",)
