"""The ceiling: our compiled model run in-process on already-preprocessed tensors (no HTTP, no
decoding) at each batch size, and decode + preprocess measured on its own, with the same code the
handler uses. Runs as its own process with `--threads` torch threads; prints one JSON object.
With `--device cuda` the model, the batch and the preprocessing backend the handler would pick are on
the GPU, and every timed call waits for the GPU to finish (CUDA calls return before the work is done).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import torch

from tsvk.common import HandlerSettings, RequestError, label_for, load_labels, task_kind
from tsvk.model import load_model
from tsvk.preprocess import build_preprocessor, decode_rgb, probe
from tsvk.tasks import task_class
from tsvk.worker import reuse_freed_heap


def no_sync() -> None:
    """On the CPU a call is done when it returns."""


def device_sync(device: torch.device):
    """What waits for `device` to finish its queued work: needed to time CUDA calls."""
    return torch.cuda.synchronize if device.type == "cuda" else no_sync


def timed_calls(call, seconds: float, min_calls: int = 3, sync=no_sync) -> list[float]:
    """Seconds per call, calling until `seconds` have passed and at least `min_calls` were made."""
    durations: list[float] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(durations) < min_calls:
        started = time.perf_counter()
        call()
        sync()
        durations.append(time.perf_counter() - started)
    return durations


def model_throughput(forward, batch: torch.Tensor, sizes: list[int], seconds: float, rounds: int = 3,
                     sync=no_sync) -> dict[str, dict]:
    """Batch size -> images/s from the median call (a ceiling: robust to another process's burst),
    the mean-based rate beside it; sizes are interleaved over `rounds` so a burst cannot hit one size only."""
    calls: dict[int, list[float]] = {size: [] for size in sizes}
    parts = {size: batch[:size].contiguous() for size in sizes}
    with torch.inference_mode():
        for size in sizes:
            forward(parts[size])  # warm-up (and, on a GPU, the first call's kernel selection)
        sync()
        for _ in range(rounds):
            for size in sizes:
                calls[size] += timed_calls(lambda: forward(parts[size]), seconds / rounds, sync=sync)
    return {str(size): {"images_per_s": round(size / statistics.median(durations), 2),
                        "mean_images_per_s": round(size * len(durations) / sum(durations), 2),
                        "calls": len(durations), "call_ms": sorted(round(c * 1e3, 2) for c in durations)}
            for size, durations in calls.items()}


def preprocess_throughput(encoded: list, preprocessor, decode, batch: int, seconds: float, sync=no_sync) -> dict[str, float]:
    """Images/s (median call) for CPU decode alone and for the backend's decode + resize + crop + normalize,
    `batch` images per call."""
    group = [encoded[i % len(encoded)] for i in range(batch)]
    decode_calls = timed_calls(lambda: [decode(image) for image in group], seconds)
    preprocessor(group)  # warm-up: a GPU backend allocates its buffers on the first batch
    full_calls = timed_calls(lambda: preprocessor(group), seconds, sync=sync)
    return {
        "decode_images_per_s": round(batch / statistics.median(decode_calls), 2),
        "preprocess_images_per_s": round(batch / statistics.median(full_calls), 2),
    }


def load_archive(mar: Path, folder: str, device: torch.device = torch.device("cpu")):
    """Settings, loaded model, preprocessor and labels of an unpacked archive, as the handler loads them (its heap kept
    for reuse as a worker's is)."""
    import yaml

    zipfile.ZipFile(mar).extractall(folder)
    settings = HandlerSettings.from_model_yaml(yaml.safe_load(Path(folder, "model-config.yaml").read_text()))
    model = load_model(settings.artifact, Path(folder), device, task=settings.task)
    preprocessor, choice = build_preprocessor(settings.preprocess, model.device, model.input_dtype)
    if settings.runtime.heap_trim_interval_ms:
        reuse_freed_heap()
    return settings, model, preprocessor, choice, load_labels(Path(folder) / settings.labels_file)


def top1_labels(model, batch: torch.Tensor, labels) -> dict[str, str]:
    with torch.inference_mode():
        indices = model.forward(batch).argmax(1).tolist()
    return {str(i): label_for(labels, index) for i, index in enumerate(indices)}


class TaskInputs:
    """The model input of a detector or segmenter (a list of images, or one same-size group) sliced like a batch."""

    def __init__(self, prepared):
        self.items = prepared.inputs if hasattr(prepared, "inputs") else prepared.groups[0][1]

    def __getitem__(self, part: slice):
        return TaskInputs.sliced(self.items[part])

    @staticmethod
    def sliced(items):
        holder = TaskInputs.__new__(TaskInputs)
        holder.items = items
        return holder

    def contiguous(self):
        return self


def task_forward(model):
    """forward(TaskInputs): the detector takes a list of images, the segmenter a tensor."""
    return lambda inputs: model.forward(list(inputs.items) if isinstance(inputs.items, list) else inputs.items)


def probe_archive(mar: Path, images: list[Path], seconds: float, device: torch.device = torch.device("cpu")) -> dict:
    started = time.monotonic()
    sync = device_sync(device)
    with tempfile.TemporaryDirectory(prefix="tsvk-ceiling-") as folder:
        settings, model, preprocessor, choice, labels = load_archive(mar, folder, device)
        task = task_class(settings.task)(settings, model, preprocessor, labels)
        encoded = probed([path.read_bytes() for path in images], settings.preprocess, preprocessor.min_short_side)  # those a worker takes
        max_batch = settings.artifact.max_batch
        prepared = task.prepare([encoded[i % len(encoded)] for i in range(max_batch)]).batch
        if task_kind(settings.task).top_k:
            batch, forward, top1 = prepared, model.forward, top1_labels(model, prepared[: len(encoded)], labels)
        else:  # same-size photos (the benchmark's) make one group: a batch of the task's own input
            batch, forward, top1 = TaskInputs(prepared), task_forward(model), {}
        ready_s = time.monotonic() - started
        sizes = sorted({1, 2, 4, max_batch} & set(range(1, max_batch + 1)))
        results = model_throughput(forward, batch, sizes, seconds, sync=sync)
        rates = preprocess_throughput(encoded, task.prepare, decode_rgb, max_batch, seconds, sync=sync)
    return {"ready_s": round(ready_s, 2), "threads": torch.get_num_threads(), "format": settings.artifact.format,
            "device": str(model.device), "preprocess_backend": choice.name, "batches": results, "top1": top1, **rates}


def pipeline_calls(pipeline, seconds: float, sync=no_sync) -> tuple[list[float], tuple[float, float]]:
    """Seconds per call of the whole pipeline (bytes in, logits out), after one unmeasured warm-up call; and when the
    timed calls began and ended on `time.monotonic()`'s clock, which the bench reads this process's CPU over."""
    pipeline()
    sync()
    began = time.monotonic()
    durations = timed_calls(pipeline, seconds, sync=sync)
    return durations, (began, time.monotonic())


def probe_pipeline(mar: Path, images: list[Path], seconds: float, batch: int, device: torch.device = torch.device("cpu"),
                   check: list[Path] | None = None, wait_for_go=None, every_photo: bool = False) -> dict:
    """Images/s of one process doing what a worker does per batch, back to back: probe the photos' bytes, decode +
    resize + crop + normalize them, run the model and shape the answers (the handler's own task code: a
    classifier's top-k, a segmenter's class map and label map, a detector's boxes and masks). No server, no HTTP.
    A photo the worker refuses (over `max_pixels`, say) costs its probe, as in a worker, and is not counted.
    `every_photo`: the calls take the photos' batches in turn, so each photo is in as many batches as the others
    (`photo_batches`), and the rate is answered photos over the calls' whole time (they differ in cost); otherwise
    every call is the first batch and the rate is from the median call.
    `check`: photos answered one by one first (`photo_answers`); `wait_for_go`: called once loaded, before timing."""
    started = time.monotonic()
    sync = device_sync(device)
    with tempfile.TemporaryDirectory(prefix="tsvk-ceiling-") as folder:
        settings, model, preprocessor, choice, labels = load_archive(mar, folder, device)
        task = task_class(settings.task)(settings, model, preprocessor, labels)
        groups = photo_batches([path.read_bytes() for path in images], batch, every_photo)
        options = [task.options({}) for _ in range(batch)]  # each request with the task's default options
        answered = [len(probed(group, settings.preprocess, preprocessor.min_short_side)) for group in groups]
        turn = itertools.count()

        def pipeline():
            encoded = probed(groups[next(turn) % len(groups)], settings.preprocess, preprocessor.min_short_side)
            prepared = task.prepare(encoded).batch
            with torch.inference_mode():
                task.answer(prepared, options[: len(encoded)])

        answers = photo_answers(task, settings.preprocess, check or [], preprocessor.min_short_side)
        ready_s = time.monotonic() - started
        if wait_for_go:
            wait_for_go()
        durations, timed_span = pipeline_calls(pipeline, seconds, sync=sync)
    counted = sum(answered[(1 + i) % len(groups)] for i in range(len(durations)))  # call 0 was the warm-up
    mean_rate = round(counted / sum(durations), 2)
    return {"ready_s": round(ready_s, 2), "threads": torch.get_num_threads(), "format": settings.artifact.format,
            "device": str(model.device), "preprocess_backend": choice.name, "top1": {}, "answers": answers,
            "timed_span": timed_span, "answered_per_batch": round(statistics.mean(answered), 2),
            "refused_per_batch": round(batch - statistics.mean(answered), 2),
            "batches": {str(batch): {"images_per_s": mean_rate if every_photo else round(answered[0] / statistics.median(durations), 2),
                                     "mean_images_per_s": mean_rate,
                                     "calls": len(durations), "call_ms": sorted(round(c * 1e3, 2) for c in durations)}}}


def photo_batches(data: list[bytes], batch: int, every_photo: bool) -> list[list[bytes]]:
    """The batches the calls take in turn: the photos cycled `batch` at a time until each has been in as many batches
    as the others (len(data) batches), or the first batch alone."""
    starts = range(0, len(data) * batch, batch) if every_photo else [0]
    return [[data[(start + i) % len(data)] for i in range(batch)] for start in starts]


def probed(group: list[bytes], limits, min_short_side: int) -> list:
    """The photos' headers, as a worker probes them; those it refuses (RequestError) are left out."""
    kept = []
    for raw in group:
        try:
            kept.append(probe_as_served(raw, limits, min_short_side))
        except RequestError:
            continue
    return kept


def probe_as_served(data: bytes, limits, min_short_side: int):
    """A photo's header checked as the served worker checks it (VisionService._image_or_pixels): a large JPEG counted
    at the DCT scale its preprocessor decodes it at, so the ceiling takes the photos a worker takes."""
    return probe(data, limits.max_pixels, limits.max_jpeg_scans, limits.max_jpeg_scan_blocks,
                 max_jpeg_pixels=limits.max_jpeg_pixels, min_short_side=min_short_side)


def photo_answers(task, limits, files: list[Path], min_short_side: int) -> list[dict]:
    """Each photo's answer as the handler gives it, one at a time: {"status": 200, "answer": ...}, or the status and
    error a worker refuses it with."""
    answers = []
    for path in files:
        try:
            prepared = task.prepare([probe_as_served(path.read_bytes(), limits, min_short_side)])
        except RequestError as err:
            answers.append({"status": err.status, "error": str(err)[:200]})
            continue
        failed = getattr(prepared, "failed", None)
        if failed:
            err = next(iter(failed.values()))
            answers.append({"status": err.status, "error": str(err)[:200]})
            continue
        with torch.inference_mode():
            answers.append({"status": 200, "answer": task.answer(prepared.batch, [task.options({})])[0]})
    return answers


def go_on_stdin() -> None:
    """Say `ready` on stdout and wait for a line on stdin: the processes of a ceiling then time the same seconds."""
    print("ready", flush=True)
    sys.stdin.readline()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mar", type=Path, required=True)
    parser.add_argument("--images", type=Path, nargs="+", required=True)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--pipeline-batch", type=int, default=0,
                        help="time decode + preprocess + model together at this batch size instead of the model alone")
    parser.add_argument("--check", type=Path, nargs="*", default=[], help="with --pipeline-batch: photos whose answers to give")
    parser.add_argument("--every-photo", action="store_true",
                        help="with --pipeline-batch: take every photo's batches in turn, the rate over the calls' whole time")
    parser.add_argument("--wait-for-go", action="store_true",
                        help="with --pipeline-batch: print `ready` once loaded and wait for a line on stdin before timing")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.pipeline_batch:
        print(json.dumps(probe_pipeline(args.mar, args.images, args.seconds, args.pipeline_batch, torch.device(args.device),
                                        args.check, go_on_stdin if args.wait_for_go else None, args.every_photo)))
    else:
        print(json.dumps(probe_archive(args.mar, args.images, args.seconds, torch.device(args.device))))


if __name__ == "__main__":
    main()
