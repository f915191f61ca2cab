"""The ceiling: our compiled model in-process on preprocessed tensors (no HTTP, no decoding), at
each batch size up to the compiled maximum, with all vCPUs as torch threads; and decode + preprocess
on its own. Runs in a child process so its memory and CPU are sampled like every other system's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ....errors import UsageError
from ....measure.stats import latency_summary
from .base import RunContext, System
from .process import clean_env


class ComputeCeiling(System):
    name = "ceiling"
    label = "Ceiling: compiled model in-process"
    description = ("our archive's compiled model called in-process on preprocessed tensors at its best batch size, "
                   "all vCPUs as torch threads (no HTTP, no decoding); decode + preprocess measured separately")
    self_timed = True

    def archive(self, ctx: RunContext) -> Path:
        return ctx.ours_mar

    def prepare(self, ctx: RunContext) -> None:
        self.archive(ctx)

    def probe_arguments(self, ctx: RunContext) -> list[str]:
        """What the probe measures (apps/ceiling_probe.py): the model alone at each batch size, for each ceiling_seconds."""
        return ["--seconds", str(ctx.options.ceiling_seconds)]

    def run(self, ctx: RunContext, variant: dict) -> dict:
        command = [sys.executable, "-m", "tsvk_tools.lab.bench.apps.ceiling_probe", "--mar", str(self.archive(ctx)),
                   "--threads", str(ctx.vcpus), *self.probe_arguments(ctx), "--device", ctx.options.device,
                   "--images", *[str(p.file) for p in ctx.photos]]
        done = subprocess.run(command, env=clean_env(), capture_output=True, text=True)
        if done.returncode != 0:
            raise UsageError(f"the ceiling probe failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
        return summarize_probe(json.loads(done.stdout.strip().splitlines()[-1]))


def summarize_probe(probe: dict) -> dict:
    """The best batch size is the ceiling; per-call latency there; the preprocessing rates beside it."""
    best_size, best = max(probe["batches"].items(), key=lambda item: item[1]["images_per_s"])
    return {
        "requests": sum(b["calls"] * int(size) for size, b in probe["batches"].items()),
        "errors": 0,
        "throughput_ips": best["images_per_s"],
        "latency_ms": latency_summary([ms / 1e3 for ms in best["call_ms"]]),
        "ready_s": probe["ready_s"],
        "top1": probe["top1"],
        "details": {
            "best_batch": int(best_size),
            "threads": probe["threads"],
            "format": probe["format"],
            "device": probe.get("device", "cpu"),
            "preprocess_backend": probe.get("preprocess_backend", "cpu"),
            "images_per_s_by_batch": {size: b["images_per_s"] for size, b in probe["batches"].items()},
            "mean_images_per_s_by_batch": {size: b["mean_images_per_s"] for size, b in probe["batches"].items()},
            "throughput_means": "batch size / median time of one call at the best batch size (mean-based rates beside it)",
            "decode_images_per_s": probe.get("decode_images_per_s"),
            "preprocess_images_per_s": probe.get("preprocess_images_per_s"),
            "latency_means": "per call of one batch of the best size",
        },
    }


class FastCeiling(ComputeCeiling):
    name = "ceiling_fast"
    label = "Ceiling: fastest CPU artifact in-process"
    description = "as the ceiling above, for the archive ours_fast serves"

    def archive(self, ctx: RunContext) -> Path:
        return ctx.fast_mar


class FastPipelineCeiling(FastCeiling):
    name = "ceiling_pipeline_fast"
    label = "Ceiling: fastest CPU artifact, decode + preprocess + model in-process"
    description = ("one process, no server: the fast archive's handler code probes, decodes, resizes, crops and normalizes a "
                   "batch of the photos' JPEG bytes, its model runs on the batch and the task shapes the answers (top-k, "
                   "class map, boxes), back to back, all vCPUs as threads; batch = the served batch size; timed for the "
                   "round's seconds (the bound for any server of this artifact)")

    def probe_arguments(self, ctx: RunContext) -> list[str]:
        return ["--seconds", str(ctx.options.round_seconds or ctx.options.ceiling_seconds), "--pipeline-batch", str(ctx.options.batch)]


class PipelineCeiling(FastPipelineCeiling):
    name = "ceiling_pipeline"
    label = "Ceiling: our archive, decode + preprocess + model in-process"
    description = "as ceiling_pipeline_fast, for the archive ours serves"

    def archive(self, ctx: RunContext) -> Path:
        return ctx.ours_mar
