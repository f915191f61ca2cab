"""Where a TorchServe request's time goes, from TorchServe's own accounting.

Before and after the measured load the harness reads the Prometheus endpoint (counters: requests,
summed queue and inference latency) and, at the end, the per-batch handler metrics the workers print
(`[METRICS]` lines: TorchServe's HandlerTime/PredictionTime, our TsvkPreprocessMs/TsvkInferenceMs/
TsvkBatchSize), which TorchServe logs to model_log.log / model_metrics.log.
"""

from __future__ import annotations

import re
from pathlib import Path

import psutil
import requests

from ...engines.torchserve.server import workers_below

_SAMPLE = re.compile(r"^([A-Za-z_:][\w:]*)(\{[^}]*\})?\s+(\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
# `[METRICS]Name.Unit:value|#...` (worker lines TorchServe echoes into ts_log.log in prometheus mode) or
# `<time> - Name.Unit:value|#...` (model_metrics.log / ts_metrics.log in the default log mode)
_LOG_METRIC = re.compile(r"(?:\[METRICS\]|^\S+ - )([A-Za-z]\w*)\.([A-Za-z]+):([-\d.eE+]+)\|#", re.MULTILINE)
LOGGED = ("QueueTime", "WorkerThreadTime", "HandlerTime", "PredictionTime", "TsvkBatchSize", "TsvkPreprocessMs", "TsvkInferenceMs")
PER_REQUEST = ("QueueTime", "WorkerThreadTime")  # TorchServe logs these per request, the others per batch
LOG_FILES = ("model_metrics.log", "ts_metrics.log", "ts_log.log")


def parse_prometheus(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) for each sample line of the Prometheus text format."""
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        samples.append((match.group(1), dict(_LABEL.findall(match.group(2) or "")), value))
    return samples


def metric_total(samples, name: str, model: str | None = None) -> float | None:
    """Sum of a metric's samples (for one model when given); None when TorchServe does not export it."""
    chosen = [v for n, labels, v in samples if n == name and (model is None or labels.get("model_name", labels.get("ModelName")) == model)]
    return sum(chosen) if chosen else None


def scrape(run) -> list[tuple[str, dict[str, str], float]]:
    try:
        response = requests.get(f"{run.url('metrics')}/metrics", headers=run.headers("management"), timeout=5)
    except requests.RequestException:
        return []
    return parse_prometheus(response.text) if response.status_code == 200 else []


COUNTERS = ("ts_inference_requests_total", "ts_queue_latency_microseconds", "ts_inference_latency_microseconds")


def torchserve_profile(run, model: str) -> dict:
    """Counters now, plus every handler metric logged so far (the harness takes differences)."""
    samples = scrape(run)
    counters = {name: metric_total(samples, name, model) for name in COUNTERS}
    return {"counters": counters, "handler": logged_handler_metrics(Path(run.run_dir) / "logs"), "workers": read_worker_env(run.pid)}


def logged_handler_metrics(logs: Path) -> dict[str, list[float]]:
    """Metric name -> values in order, for the LOGGED names; each name from the first file that has it
    (TorchServe writes some lines twice in ts_log.log: means are unaffected, counts are not used)."""
    values: dict[str, list[float]] = {}
    for name in LOG_FILES:
        path = logs / name
        if not path.is_file():
            continue
        found: dict[str, list[float]] = {}
        for match in _LOG_METRIC.finditer(path.read_text(errors="replace")):
            if match.group(1) in LOGGED:
                found.setdefault(match.group(1), []).append(float(match.group(3)))
        for metric, numbers in found.items():
            values.setdefault(metric, numbers)
    return values


def profile_difference(before: dict, after: dict) -> dict:
    """Means over the measured load only: queue and end-to-end time per request, handler metrics per batch."""
    counts = _deltas(before.get("counters", {}), after.get("counters", {}))
    requests_done = counts.get("ts_inference_requests_total")
    per_request, per_batch = {}, {}
    if requests_done:
        for name, key in (("ts_queue_latency_microseconds", "queue_ms"), ("ts_inference_latency_microseconds", "frontend_latency_ms")):
            if counts.get(name) is not None:
                per_request[key] = round(counts[name] / requests_done / 1e3, 2)
    for name, values in after.get("handler", {}).items():
        new = values[len(before.get("handler", {}).get(name, [])):]
        if new:
            (per_request if name in PER_REQUEST else per_batch)[name] = {"mean": round(sum(new) / len(new), 2)}
    return {"requests": requests_done, "per_request": per_request, "per_batch": per_batch}


def _deltas(before: dict, after: dict) -> dict:
    return {k: (after[k] - (before.get(k) or 0)) if after.get(k) is not None else None for k in after}


def read_worker_env(frontend_pid: int, names: tuple[str, ...] = ("OMP_NUM_THREADS",)) -> list[dict]:
    """For each TorchServe worker process: its pid, thread count and chosen environment variables."""
    workers = []
    for process in workers_below(frontend_pid):
        try:
            env = process.environ()
            workers.append({"pid": process.pid, "threads": process.num_threads(), **{n: env.get(n) for n in names}})
        except psutil.Error:
            continue
    return workers
