"""Where a segmenter worker's time goes, per stage, in one process on one thread (as each worker runs).

The stages of one batch of the benchmark's photos (8 x 640x480 JPEG): decode, the uint8 resize, the
normalize into the model's NCHW float input, the model, the class map, and the answer (areas and the
label-map PNG). The class map and the normalize run beside the reference they replace (argmax over
the channels; a channels-last float copy, then NCHW), in alternating rounds, so a machine shared
with other work slows both alike. Prints medians with min-max and the load average before and after.

    python -m tsvk_tools.bench.segment_stages --mar .tsvk/bench/deeplabv3_mobilenet_v3_large/ours-*/*.mar
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
from tsvk.decode import decode_rgb, probe
from tsvk.preprocess.tensor_ops import _as_batch
from tsvk.tasks import task_kind
from tsvk.tasks.segment import class_map, segmenter_resize

from .apps.ceiling_probe import load_archive
from .preprocess import photo_jpegs


def _load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def stage_calls(mar: Path, folder: str) -> dict:
    """Stage name -> a call doing that stage for one batch of the benchmark's photos."""
    settings, model, preprocessor, _, labels = load_archive(mar, folder)
    task = task_kind(settings.task).task_class()(settings, model, preprocessor, labels)
    encoded = [probe(data, settings.preprocess.max_pixels) for data in photo_jpegs()]
    decoded = [decode_rgb(image) for image in encoded]
    resized = segmenter_resize(decoded, settings.preprocess)
    stacked = _as_batch(resized)
    inputs = task.normalize(stacked)
    scores = model.forward(inputs)
    classes = class_map(scores)
    options = {"label_map": True, "label_map_max_side": 0}
    original = (decoded[0].shape[-2], decoded[0].shape[-1])
    normalize = task.normalize
    return {
        "decode": lambda: [decode_rgb(image) for image in encoded],
        "resize (uint8)": lambda: segmenter_resize(decoded, settings.preprocess),
        "normalize, channels-last then NCHW (reference)": lambda: torch.addcmul(
            normalize.offset, stacked.to(torch.float32), normalize.scale).contiguous(),
        "normalize into NCHW": lambda: normalize(stacked),
        "model": lambda: model.forward(inputs),
        "class map, argmax (reference)": lambda: scores.argmax(1),
        "class map, running comparison": lambda: class_map(scores),
        "answer (areas, label-map PNG)": lambda: [task.describe(m, original, options) for m in classes],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mar", type=Path, required=True, help="a segmenter archive")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="tsvk-stages-") as folder:
        calls = stage_calls(args.mar, folder)
        before = _load_average()
        times: dict[str, list[float]] = {name: [] for name in calls}
        for _ in range(args.rounds):
            for name, call in calls.items():
                started = time.perf_counter()
                call()
                times[name].append((time.perf_counter() - started) * 1e3)
    print(f"{args.mar.name}: 8 photos 640x480 per batch, {args.threads} thread(s), {args.rounds} alternating rounds; "
          f"load average before {before}, after {_load_average()}")
    for name, durations in times.items():
        print(f"  {name:48s} {statistics.median(durations):8.1f} ms per batch ({min(durations):.1f}-{max(durations):.1f})")


if __name__ == "__main__":
    main()
