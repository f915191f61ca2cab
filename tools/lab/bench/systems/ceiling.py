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
from ..orientation import check_files, rows_from_answers
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
        return summarize_probe(self.probe(ctx, ctx.vcpus))

    def probe(self, ctx: RunContext, threads: int) -> dict:
        """What the probe printed, run on this system's archive with `threads` torch threads."""
        command = [sys.executable, "-m", "tsvk_tools.lab.bench.apps.ceiling_probe", "--mar", str(self.archive(ctx)),
                   "--threads", str(threads), *self.probe_arguments(ctx), "--device", ctx.options.device,
                   "--images", *[str(p.file) for p in ctx.photos]]
        done = subprocess.run(command, env=clean_env(), capture_output=True, text=True)
        if done.returncode != 0:
            raise UsageError(f"the ceiling probe failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])


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
        "load_window": probe.get("timed_span"),  # the pipeline's timed calls; the model-alone probe times several sizes: none
        "details": {
            "best_batch": int(best_size),
            "processes": probe.get("processes", 1),
            "refused_per_batch": probe.get("refused_per_batch", 0),  # photos the archive's limits refuse: probed, not counted
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


def model_cost(ctx: RunContext) -> dict:
    """The fast archive's model alone on one thread at its cheapest batch size: milliseconds per image."""
    probe = FastCeiling().probe(ctx, threads=1)
    size, best = max(probe["batches"].items(), key=lambda item: item[1]["images_per_s"])
    return {"ms_per_image": round(1e3 / best["images_per_s"], 2), "batch": int(size), "threads": 1, "format": probe["format"]}


class FastPipelineCeiling(FastCeiling):
    name = "ceiling_pipeline_fast"
    label = "Ceiling: fastest CPU artifact, decode + preprocess + model in-process"
    description = ("one process, no server: the fast archive's handler code probes, decodes, resizes, crops and normalizes a "
                   "batch of the photos' JPEG bytes, its model runs on the batch and the task shapes the answers (top-k, "
                   "class map, boxes), back to back, all vCPUs as threads; batch = the served batch size; timed for the "
                   "round's seconds (the bound for any server of this artifact). With photos as sent, one such process "
                   "per vCPU with one thread each, timed over the same seconds and added up, each taking every photo's "
                   "batches in turn: decoding a photo runs on one core, so one process would leave the others idle while "
                   "it decodes")

    def probe_arguments(self, ctx: RunContext) -> list[str]:
        return ["--seconds", str(ctx.options.round_seconds or ctx.options.ceiling_seconds), "--pipeline-batch", str(ctx.options.batch)]

    def run(self, ctx: RunContext, variant: dict) -> dict:
        """One process with every vCPU as a thread; with photos as sent, one single-threaded process per vCPU."""
        if not ctx.options.as_sent:
            return super().run(ctx, variant)
        command = [sys.executable, "-m", "tsvk_tools.lab.bench.apps.ceiling_probe", "--mar", str(self.archive(ctx)), "--threads", "1",
                   *self.probe_arguments(ctx), "--device", ctx.options.device, "--wait-for-go", "--every-photo",
                   "--images", *[str(p.file) for p in ctx.photos]]
        check = ["--check", *map(str, check_files(ctx.photos))]
        probes = run_together([command + check] + [command] * (ctx.vcpus - 1), ctx.system_dir(self.name))
        summary = summarize_probe(combine_processes(probes))
        summary["orientation"] = rows_from_answers(ctx.photos, probes[0].get("answers") or [])
        return summary


class PipelineCeiling(FastPipelineCeiling):
    name = "ceiling_pipeline"
    label = "Ceiling: our archive, decode + preprocess + model in-process"
    description = "as ceiling_pipeline_fast, for the archive ours serves"

    def archive(self, ctx: RunContext) -> Path:
        return ctx.ours_mar


def run_together(commands: list[list[str]], folder: Path) -> list[dict]:
    """Start every probe, wait until each has loaded (its `ready` line), then let them all time the same seconds; each
    one's JSON. Their stderr goes to probe-<i>.log in `folder`."""
    children = []
    try:
        for index, command in enumerate(commands):
            with open(folder / f"probe-{index}.log", "ab") as log:
                children.append(subprocess.Popen(command, env=clean_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                                 text=True))
        for index, child in enumerate(children):
            if child.stdout.readline().strip() != "ready":
                raise UsageError(f"a ceiling probe ended before it was ready ({child.wait()}); see {folder / f'probe-{index}.log'}")
        for child in children:
            child.stdin.write("go\n")
            child.stdin.close()
        return [_probe_output(child, folder / f"probe-{index}.log") for index, child in enumerate(children)]
    finally:
        for child in children:  # only when something failed: no probe outlives the run
            if child.poll() is None:
                child.kill()
                child.wait()


def _probe_output(child: subprocess.Popen, log: Path) -> dict:
    out = child.stdout.read()
    if child.wait() != 0 or not out.strip():
        raise UsageError(f"a ceiling probe failed ({child.returncode}); see {log}")
    return json.loads(out.strip().splitlines()[-1])


def combine_processes(probes: list[dict]) -> dict:
    """Probes that timed the same seconds side by side as one: their rates added, their calls pooled, their timed span
    the seconds all of them were timing."""
    first = probes[0]
    size, _ = next(iter(first["batches"].items()))
    parts = [probe["batches"][size] for probe in probes]
    pooled = {"images_per_s": round(sum(p["images_per_s"] for p in parts), 2),
              "mean_images_per_s": round(sum(p["mean_images_per_s"] for p in parts), 2),
              "calls": sum(p["calls"] for p in parts), "call_ms": sorted(ms for p in parts for ms in p["call_ms"])}
    spans = [probe["timed_span"] for probe in probes if probe.get("timed_span")]
    together = (max(span[0] for span in spans), min(span[1] for span in spans)) if len(spans) == len(probes) else None
    return {**first, "ready_s": max(probe["ready_s"] for probe in probes), "processes": len(probes), "batches": {size: pooled},
            "timed_span": together}
