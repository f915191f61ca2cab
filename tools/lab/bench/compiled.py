"""How long `tsvk archive` takes per backend, and compiled vs eager throughput, side by side in one run.

Usage: tsvk bench compile --model resnet152 --backends aoti,export,torchscript,eager
Prints a Markdown table whose ratios compare each backend to eager measured in the same run, and
writes it with the raw numbers to benchmarks/results/compile-<model>.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tsvk.model import load_model

from ... import defaults
from ...archive.pack import build_archive
from ...archive.archive_info import read_archive_settings
from ...archive.backends import BACKENDS, CompileTarget
from ...archive.build import BuildRequest, example_size, requested_task
from ...errors import UsageError
from ...archive.models import WEIGHTS_NONE
from ...archive.task_builds import task_backends


def build_and_load(name: str, model: str, weights: str, max_batch: int, store: Path, unpacked: Path) -> tuple[dict, object, CompileTarget]:
    """Build the archive exactly as `tsvk archive` does (timed), then load it back as a worker does."""
    import zipfile

    import torch

    start = time.perf_counter()
    mar, result = build_archive(BuildRequest(model=model, backend=name, weights=weights, max_batch=max_batch), store)
    row = {"backend": name, "archive_seconds": round(time.perf_counter() - start, 1), "archive_mib": round(mar.stat().st_size / 2**20, 1),
           "verification": read_archive_settings(mar).provenance["verification"]}
    zipfile.ZipFile(mar).extractall(unpacked / name)
    settings = result.settings
    target = CompileTarget("cpu", "fp32", max_batch, settings.preprocess.crop, task=settings.task,
                           size=example_size(settings.preprocess), max_side=settings.preprocess.max_size)
    labels = result.resolved.labels
    loaded = load_model(settings.artifact, unpacked / name, torch.device("cpu"), num_classes=len(labels) if labels else None,
                        task=settings.task)
    return row, loaded.forward, target


def interleaved_throughput(models: dict[str, object], target: CompileTarget, batch: int, repeats: int) -> dict[str, float]:
    """images/s per backend, timing one call of each in turn so the machine's load drifts over all alike."""
    import torch

    x = target.example(batch, seed=7)
    times: dict[str, list[float]] = {name: [] for name in models}
    with torch.no_grad():
        for model in models.values():  # warm-up
            model(x)
            model(x)
        for _ in range(repeats):
            for name, model in models.items():
                start = time.perf_counter()
                model(x)
                times[name].append(time.perf_counter() - start)
    return {name: batch / statistics.median(t) for name, t in times.items()}


def markdown(rows: list[dict], batches: list[int], model: str, threads: int, command: str) -> str:
    eager = next((r for r in rows if r["backend"] == "eager"), None)
    head = "| backend | `tsvk archive` time (s) | archive MiB | " + " | ".join(f"img/s @ batch {b} | vs eager" for b in batches) + " |"
    lines = [f"{model}, fp32, CPU, {threads} torch threads. Command: `{command}`", "", head, "|" + "---|" * (3 + 2 * len(batches))]
    for r in rows:
        cells = []
        for b in batches:
            ratio = r["images_per_s"][b] / eager["images_per_s"][b] if eager else float("nan")
            cells += [f"{r['images_per_s'][b]:.1f}", f"{ratio:.2f}x"]
        lines.append(f"| {r['backend']} | {r['archive_seconds']} | {r['archive_mib']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def default_backends(model: str) -> str:
    """The CPU backends that can build this model's task (a detector: torchscript and eager)."""
    task = requested_task(BuildRequest(model=model))
    return ",".join(name for name in task_backends(task) if "cpu" in BACKENDS[name].precisions)


def build_parser() -> argparse.ArgumentParser:
    cpu_backends = ",".join(name for name, backend in BACKENDS.items() if "cpu" in backend.precisions)
    parser = argparse.ArgumentParser(prog="tsvk bench compile", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=defaults.MODEL, help="a torchvision classification, detection or segmentation builder "
                        f"(default {defaults.MODEL})")
    parser.add_argument("--backends", help=f"comma-separated backends (default: those the model's task allows of {cpu_backends})")
    parser.add_argument("--weights", default=WEIGHTS_NONE, help="as `tsvk archive --weights` (default none: speed does not depend on them)")
    parser.add_argument("--batches", default=f"1,{defaults.MAX_BATCH}", help="comma-separated batch sizes to time")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--output-dir", type=Path, default=Path("benchmarks/results"))
    return parser


def main(argv: list[str] | None = None) -> int:
    import torch

    args = build_parser().parse_args(argv)
    batches = [int(b) for b in args.batches.split(",")]
    args.backends = args.backends or default_backends(args.model)
    rows, loaded = [], {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for name in args.backends.split(","):
                row, loaded[name], target = build_and_load(name, args.model, args.weights, max(batches), Path(tmp) / name, Path(tmp))
                rows.append(row)
                print(f"{name}: archive built in {row['archive_seconds']} s", flush=True)
            speeds = {b: interleaved_throughput(loaded, target, b, args.repeats) for b in batches}
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for row in rows:
        row["images_per_s"] = {b: speeds[b][row["backend"]] for b in batches}
    cache = "TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) " if os.environ.get("TORCHINDUCTOR_CACHE_DIR") else ""  # cold compile
    command = cache + "tsvk bench compile " + " ".join(argv if argv is not None else sys.argv[1:])
    table = markdown(rows, batches, args.model, torch.get_num_threads(), command.strip())
    print(table)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    (args.output_dir / f"compile-{args.model}.md").write_text(table)
    (args.output_dir / f"compile-{args.model}.json").write_text(
        json.dumps({"model": args.model, "command": command, "rows": rows}, indent=2)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
