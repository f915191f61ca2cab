"""OpenVINO fp32 / int8 against eager and AOTInductor: CPU speed, and what int8 does to accuracy.

Usage: python -m tsvk_tools.bench.openvino_check [--photos DIR] [--rounds N]
1. Speed: ResNet-50 with random weights at batch 8 and 1 intra-op thread; each variant is built by
   `tsvk_tools.build.build.build` (as `tsvk archive` does) and loaded by the handler's loader, then the
   variants run in alternating rounds of the same process, so a noisy machine slows them alike.
2. Accuracy: EfficientNet-Lite0 (real ImageNet weights, tools/build/zoo) on labelled photos (a directory
   with `wnids.txt`): int8 calibrates on 2 of every 5 photos, and eager fp32, openvino fp32 and
   openvino int8 are all scored on the others (the same held-out photos).
Prints a plain-text report; commit it as benchmarks/results/openvino-<date>.txt.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from tsvk.loading import load_model

from ..build.build import BuildRequest, build
from ..build.calibration import int8_photos
from ..errors import UsageError
from ..build.models import CustomModel
from ..build.verify_int8 import accuracy, logits
from ..build.zoo import efficientnet_lite0 as lite0

SPEED_VARIANTS = (("aoti", "fp32"), ("aoti", "int8"), ("openvino", "fp32"), ("openvino", "int8"))
ACCURACY_VARIANTS = (("aoti", "int8"), ("openvino", "fp32"), ("openvino", "int8"))


def served(request: BuildRequest, workdir: Path):
    """Build as `tsvk archive` does, then load the artifact as a worker does: (forward, build result)."""
    workdir.mkdir(parents=True)
    result = build(request, workdir)
    return load_model(result.settings.artifact, workdir, torch.device("cpu")).forward, result


def time_rounds(models: dict, batch: torch.Tensor, rounds: int) -> dict[str, list[float]]:
    """img/s of each model per round; within a round every model runs once, in turn."""
    rates: dict[str, list[float]] = {name: [] for name in models}
    with torch.no_grad():
        for forward in models.values():
            forward(batch)  # warm-up: first-call allocations and lazy initialisation
        for _ in range(rounds):
            for name, forward in models.items():
                start = time.perf_counter()
                forward(batch)
                rates[name].append(len(batch) / (time.perf_counter() - start))
    return rates


def speed(rounds: int, work: Path) -> list[str]:
    torch.manual_seed(0)
    models = {}
    for backend, precision in SPEED_VARIANTS:
        request = BuildRequest(model="resnet50", backend=backend, precision=precision, weights="none", max_batch=8)
        models[f"{backend} {precision}"], result = served(request, work / f"r50-{backend}-{precision}")
        models.setdefault("eager fp32", result.resolved.model.eval())
    batch = torch.randn(8, 3, 224, 224)
    rates = time_rounds(models, batch, rounds)
    eager = statistics.median(rates["eager fp32"])
    lines = [f"ResNet-50 (random weights), batch 8, {torch.get_num_threads()} thread(s), {rounds} alternating rounds",
             f"{'variant':<16} {'median img/s':>12} {'min':>7} {'max':>7} {'vs eager':>9}"]
    for name, values in rates.items():
        median = statistics.median(values)
        lines.append(f"{name:<16} {median:12.2f} {min(values):7.2f} {max(values):7.2f} {median / eager:8.2f}x")
    return lines


def lite0_request(backend: str, precision: str, photos: Path) -> BuildRequest:
    custom = CustomModel(file=Path(lite0.__file__), factory="EfficientNetLite0", resize=lite0.RESIZE, crop=lite0.CROP,
                         mean=lite0.MEAN, std=lite0.STD)
    return BuildRequest(model="efficientnet_lite0", backend=backend, precision=precision, weights=str(lite0.weights_path()),
                        custom=custom, calibration=photos if precision == "int8" else None)


def accuracy_check(photos: Path, work: Path) -> list[str]:
    scored, notes, eager, held_out = {}, [], None, None
    for backend, precision in ACCURACY_VARIANTS:
        request = lite0_request(backend, precision, photos)
        try:
            forward, result = served(request, work / f"lite0-{backend}-{precision}")
        except UsageError as err:  # int8 refused by its own verification: the refusal carries the numbers
            notes.append(f"{backend} {precision} refused: {err}")
            continue
        if held_out is None:
            eager = result.resolved.model.eval()
            held_out = int8_photos(photos, result.settings.preprocess, random_weights=False).held_out
            scored["eager fp32"] = accuracy(logits(eager, held_out.batch, 8), held_out.labels)
        scored[f"{backend} {precision}"] = accuracy(logits(forward, held_out.batch, 8), held_out.labels)
        notes.append(f"{backend} {precision} build: {result.report.describe()}")
    lines = [f"EfficientNet-Lite0 (ImageNet weights), {len(held_out) if held_out else 0} held-out photos of {photos} "
             "(2 of every 5 by name calibrate int8, the others are scored)",
             f"{'variant':<16} {'top-1':>7} {'top-5':>7}"]
    lines += [f"{name:<16} {s['top1']:7.1%} {s['top5']:7.1%}" for name, s in scored.items()]
    return lines + [""] + notes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--photos", type=Path, default=Path("/work/shared/imagenet-samples"),
                        help="labelled photos (a directory with wnids.txt and <wnid>_*.JPEG)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--skip", choices=("speed", "accuracy"), help="run one part only")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    command = "python -m tsvk_tools.bench.openvino_check " + shlex.join(argv if argv is not None else sys.argv[1:])
    report = [f"$ {command.strip()} (affinity: cores {sorted(os.sched_getaffinity(0))})", f"torch {torch.__version__}, started {time.strftime('%Y-%m-%d %H:%M:%S')}", ""]
    with tempfile.TemporaryDirectory(prefix="tsvk-ov-check-") as tmp:
        if args.skip != "speed":
            report += speed(args.rounds, Path(tmp)) + [""]
        if args.skip != "accuracy":
            report += accuracy_check(args.photos, Path(tmp))
    print("\n".join(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
