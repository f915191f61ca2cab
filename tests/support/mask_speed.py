"""Pasting and encoding instance masks at the photo's size: CPU seconds of two `handlers/` side by side.

    .venv/bin/python -m tests.support.mask_speed --before OLD/handlers [--rounds 5]

Each round runs both checkouts once, in alternating order, each in a fresh process with one torch thread:
100 random 28 x 28 masks on a 4000 x 3000 photo, boxes of 5-60% of each side anywhere (~130 MP pasted), every
mask at the photo's size (no budget). Prints the medians and ranges, and the load average beside them.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PHOTO, MASKS = (3000, 4000), 100
UNBOUNDED = 10**15


def measure() -> float:
    import inspect
    import time

    import torch

    from tsvk.tasks.masks import encode_masks

    torch.set_num_threads(1)
    height, width = PHOTO
    generator = torch.Generator().manual_seed(0)
    sides = torch.rand(MASKS, 2, generator=generator) * 0.55 + 0.05
    corners = torch.rand(MASKS, 2, generator=generator) * (1 - sides)
    boxes = torch.cat([corners, corners + sides], 1) * torch.tensor([width, height, width, height])
    masks = torch.rand(MASKS, 1, 28, 28, generator=generator)
    unbounded = {"max_pixels": UNBOUNDED} if "max_pixels" in inspect.signature(encode_masks).parameters else {}
    encode_masks(masks[:1], boxes[:1], PHOTO, 0.5, **unbounded)
    started = time.process_time()
    encode_masks(masks, boxes, PHOTO, 0.5, **unbounded)
    return time.process_time() - started


def _run(handlers: Path) -> float:
    code = f"import sys; sys.path[:0] = [{str(handlers)!r}, {str(ROOT)!r}]; from tests.support.mask_speed import measure; print(measure())"
    return float(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="the handlers/ of the code before")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    sides = {"before": args.before.resolve(), "now": ROOT / "handlers"}
    times: dict[str, list[float]] = {name: [] for name in sides}
    for index in range(args.rounds):
        for name in (list(sides) if index % 2 == 0 else list(sides)[::-1]):
            times[name].append(_run(sides[name]))
    load = Path("/proc/loadavg").read_text().split()[:3]
    for name, values in times.items():
        print(f"{name}: median {statistics.median(values):.2f} s of CPU (min {min(values):.2f}, max {max(values):.2f}), "
              f"{args.rounds} rounds; load average {' '.join(load)}")


if __name__ == "__main__":
    main()
