"""Decentralized: every job is its own process that loads the model and classifies one photo, with
one torch thread, at most one job per vCPU at a time (in the GPU mode each job also puts its model on
the GPU). No server, so no warm-up: each job pays the interpreter start, the imports and the model
load (and a CUDA context); that is the point of the comparison.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass

from ....measure.stats import latency_summary, rate
from .base import RunContext, System
from .process import clean_env


@dataclass
class JobResult:
    started: float
    finished: float
    returncode: int
    report: dict
    image: int
    error: str = ""


class Decentralized(System):
    name = "decentralized"
    label = "Decentralized (process per job)"
    description = (
        "each job is a fresh Python process: import torch, load the eager model, classify one photo; 1 thread, at most one job per vCPU"
    )
    self_timed = True

    def prepare(self, ctx: RunContext) -> None:
        ctx.weights

    def run(self, ctx: RunContext, variant: dict) -> dict:
        jobs = min(ctx.options.decentralized_jobs, ctx.options.jobs)
        results = run_jobs(ctx, jobs, parallel=ctx.vcpus)
        return summarize_jobs(results, parallel=ctx.vcpus)


def job_command(ctx: RunContext, image_index: int) -> list[str]:
    photo = ctx.photos[image_index]
    return [
        sys.executable,
        "-m",
        "tsvk_tools.lab.bench.apps.job",
        "--model",
        ctx.options.model,
        "--weights",
        str(ctx.weights),
        "--image",
        str(photo.file),
        "--threads",
        "1",
        "--device",
        ctx.options.device,
    ]


def run_jobs(ctx: RunContext, jobs: int, parallel: int) -> list[JobResult]:
    """Keep `parallel` job processes running until `jobs` have finished."""
    env = clean_env(OMP_NUM_THREADS="1")
    pending = list(range(jobs))
    running: list[tuple[subprocess.Popen, float, int]] = []
    done: list[JobResult] = []
    try:
        while pending or running:
            while pending and len(running) < parallel:
                image = pending.pop(0) % len(ctx.photos)
                process = subprocess.Popen(job_command(ctx, image), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                running.append((process, time.monotonic(), image))
            time.sleep(0.02)
            for entry in [e for e in running if e[0].poll() is not None]:
                running.remove(entry)
                done.append(_collect(*entry))
    finally:
        for process, _, _ in running:  # only when interrupted: no job outlives the run
            process.kill()
            process.wait()
    return done


def _collect(process: subprocess.Popen, started: float, image: int) -> JobResult:
    finished = time.monotonic()
    out, err = process.communicate()
    try:
        report = json.loads(out.strip().splitlines()[-1]) if process.returncode == 0 else {}
    except (ValueError, IndexError):
        report = {}
    error = "" if report else (err.strip().splitlines() or ["no output"])[-1][:200]
    return JobResult(started, finished, process.returncode, report, image, error)


def summarize_jobs(results: list[JobResult], parallel: int) -> dict:
    ok = [r for r in results if r.report]
    window = (min(r.started for r in results), max(r.finished for r in results)) if results else None  # first start, last end
    span = window[1] - window[0] if window else 0.0
    startup = [r.report["import_s"] + r.report["load_s"] for r in ok]
    return {
        "requests": len(results),
        "errors": len(results) - len(ok),
        "first_error": next((r.error for r in results if not r.report), ""),
        "wall_s": round(span, 2),
        "load_window": window,
        "throughput_ips": round(rate(len(ok), span), 3) if ok else None,
        "latency_ms": latency_summary([r.finished - r.started for r in ok]),
        "ready_s": round(statistics.median(startup), 2) if startup else None,
        "top1": {str(i): label for i, label in sorted({r.image: r.report["top1"] for r in ok}.items())},
        "details": {
            "parallel_jobs": parallel,
            "threads_per_job": 1,
            "median_import_s": _median(ok, "import_s"),
            "median_load_s": _median(ok, "load_s"),
            "median_classify_s": _median(ok, "classify_s"),
            "ready_means": "median time from process start until the job's model is loaded",
        },
    }


def _median(results: list[JobResult], key: str) -> float | None:
    values = [r.report[key] for r in results]
    return round(statistics.median(values), 3) if values else None
